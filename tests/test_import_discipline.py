"""The import rules of docs/architecture.md, checked by scanning each package's imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


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
    src.write_text(
        "sched.step @s world_size = 1 outputs = 0 {\n  sched.yield\n} backward {\n  sched.yield\n}\n"
    )
    code = (
        "import sys\n"
        "from sparselift.tools.sparselift_opt import main\n"
        f"main([{str(src)!r}, '-p', 'canonicalize'])\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "sched.step @s world_size = 1 outputs = 0" in out.stdout
