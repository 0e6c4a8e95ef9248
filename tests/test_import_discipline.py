"""The import rules of docs/architecture.md, checked by scanning each package's imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sparselift"

# package -> top-level modules it must never import (directly or lazily).
FORBIDDEN = {
    "ir": {"torch", "triton", "sparselift.passes", "sparselift.codegen", "sparselift.frontend", "sparselift.runtime"},
    "passes": {"torch", "triton", "sparselift.frontend", "sparselift.codegen", "sparselift.runtime"},
    "codegen": {"sparselift.frontend", "sparselift.runtime"},
    "frontend": {"sparselift.codegen", "sparselift.runtime"},
    "runtime": {"sparselift.frontend"},
    "models": {"sparselift.ir", "sparselift.passes", "sparselift.codegen", "sparselift.runtime"},
    "data": {"sparselift.ir", "sparselift.passes", "sparselift.codegen", "sparselift.runtime"},
}


# top-level module -> what it must never import (directly or lazily).
FORBIDDEN_FOR_MODULE = {
    # A leaf every stage imports (the frontend places tables, runtime and codegen read placements).
    "placement.py": {"torch", "triton", "sparselift"},
    # Shared by the frontend (position stacks) and the runtime (compact_rows), which may not
    # import each other.
    "strided_rows.py": {"triton", "sparselift"},
    # The planner gets its builder from the compiler (`CandidateBuilder`), as the search gets its
    # `Confirmer` from the planner: one way only.
    "planner.py": {"sparselift.compiler", "sparselift.frontend"},
    "plan_timing.py": {"sparselift.compiler", "sparselift.planner", "sparselift.frontend"},
    "memory_budget.py": {"sparselift.compiler", "sparselift.planner", "sparselift.frontend"},
    "plan_lookahead.py": {"sparselift.compiler", "sparselift.planner", "sparselift.frontend"},
    # The kernels' argument records: shared by the runtime's backends and codegen's Triton
    # wrappers (which may not import the runtime); torch only inside its checks.
    "kernel_args.py": {
        "triton",
        "sparselift.ir",
        "sparselift.passes",
        "sparselift.codegen",
        "sparselift.frontend",
        "sparselift.runtime",
        "sparselift.compiler",
    },
    # The sequential test and the confirmation: pure, driven by a PairMeasure (fakes in tests).
    "plan_confirm.py": {"torch", "sparselift"},
    "plan_key.py": {"sparselift.compiler", "sparselift.planner", "sparselift.runtime", "sparselift.frontend"},
    "plan_record.py": {
        "torch",
        "sparselift.compiler",
        "sparselift.planner",
        "sparselift.runtime",
        "sparselift.frontend",
        "sparselift.codegen",
    },
    "cost_fit.py": {
        "torch",
        "sparselift.compiler",
        "sparselift.planner",
        "sparselift.runtime",
        "sparselift.frontend",
        "sparselift.codegen",
    },
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_names(root: Path, package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under `package` (a directory below `root`)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: Path) -> nx.DiGraph:
    """Module -> module it imports, over the modules under `package`.

    Module-level and function-level imports alike (a lazy import is still a dependency);
    relative imports resolved; `from pkg import name` is an edge to the submodule `pkg.name`
    when there is one, else to `pkg`. A module depends on its parent package's `__init__` only
    when it imports it: Python runs the parent first anyway, and counting that would make every
    package that imports its own submodules a cycle. Imports under `if TYPE_CHECKING:` count
    too: a cycle only the type checker follows is still two modules that need each other.
    """
    modules = module_names(root, package)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def import_cycles(root: Path, package: Path) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.simple_cycles(import_graph(root, package)))


def test_no_import_cycles():
    cycles = import_cycles(ROOT, PACKAGE)
    assert cycles == [], "import cycles (module-level and lazy imports):\n" + "\n".join(
        " -> ".join([*c, c[0]]) for c in cycles
    )


def test_the_cycle_check_finds_lazy_relative_and_from_package_cycles(tmp_path):
    """The checker itself: a cycle through a function-level import, a relative import and a
    `from pkg import submodule` is found, and so is one through an import only the type checker
    sees; a package importing its own leaf submodule is not one."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import leaf\n")
    (pkg / "leaf.py").write_text("import json\n")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n    return b\n")
    (pkg / "b.py").write_text("from .sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import f\n")
    assert import_cycles(tmp_path, pkg) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    # Still a cycle when c.py names a.py's types only for the type checker.
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nimport pkg.leaf\nif TYPE_CHECKING:\n    from ..a import f\n"
    )
    assert import_cycles(tmp_path, pkg) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    # Broken: c.py no longer imports a.py.
    (pkg / "sub" / "c.py").write_text("import pkg.leaf\n")
    assert import_cycles(tmp_path, pkg) == []
    assert set(import_graph(tmp_path, pkg).edges) == {
        ("pkg", "pkg.leaf"),
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.sub.c"),
        ("pkg.sub.c", "pkg.leaf"),
    }


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_follow_the_architecture(package):
    files = sorted((PACKAGE / package).rglob("*.py"))
    violations = []
    for f in files:
        for name in imported_modules(f):
            for banned in FORBIDDEN[package]:
                if name == banned or name.startswith(banned + "."):
                    violations.append(f"{f.relative_to(ROOT)} imports {name}")
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("module", sorted(FORBIDDEN_FOR_MODULE))
def test_top_level_modules_follow_the_architecture(module):
    names = imported_modules(PACKAGE / module)
    violations = [
        name
        for name in sorted(names)
        for banned in FORBIDDEN_FOR_MODULE[module]
        if name == banned or name.startswith(banned + ".")
    ]
    assert not violations, f"sparselift/{module} imports {', '.join(violations)}"


def test_opt_tool_help_lists_dialects_and_passes_without_torch():
    code = (
        "import sys\n"
        "from sparselift.tools.sparselift_opt import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'sparselift-opt imported torch'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for word in ("sparse", "coll", "sched", "canonicalize"):
        assert word in out.stdout


def test_opt_tool_parses_and_verifies_without_torch(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text("sched.step @s world_size = 1 outputs = 0 {\n  sched.yield\n} backward {\n  sched.yield\n}\n")
    code = (
        "import sys\n"
        "from sparselift.tools.sparselift_opt import main\n"
        f"main([{str(src)!r}, '-p', 'canonicalize'])\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "sched.step @s world_size = 1 outputs = 0" in out.stdout
