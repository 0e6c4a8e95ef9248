"""`sparselift export`, driven like a user drives it: subprocesses, files, exit codes, messages.

Each command imports torch (seconds), so the commands run concurrently in two batches (the second
needs files the first writes) in one module fixture; the tests then look at the results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparselift.placement import PlacementKind, ShardingPlan
from sparselift.tools.cli import MODEL_NAMES

BIN = Path(sys.executable).parent
SPARSELIFT = str(BIN / "sparselift")
SPARSELIFT_OPT = str(BIN / "sparselift-opt")
# TorchRec's EmbeddingCollection (jagged histories looked up unpooled), from the parity tests.
COLLECTION = f"{Path(__file__).parents[1] / 'runtime' / 'parity_models.py'}:collection_model"

# Three tables sized so that `auto` at world size 2 uses every placement kind: `big` is larger
# than one rank's share (row_wise), `mid` is table_wise, `small` is under 64 KiB (data_parallel).
USER_MODEL = """
import torch
from torch import nn


class ThreeTables(nn.Module):
    def __init__(self):
        super().__init__()
        self.big = nn.EmbeddingBag(20000, 16, mode="sum")
        self.mid = nn.EmbeddingBag(5000, 16, mode="sum")
        self.small = nn.EmbeddingBag(100, 8, mode="mean")
        self.top = nn.Linear(40, 1)

    def forward(self, ids_big, offs_big, ids_mid, offs_mid, ids_small, offs_small):
        pooled = [self.big(ids_big, offs_big), self.mid(ids_mid, offs_mid), self.small(ids_small, offs_small)]
        return self.top(torch.cat(pooled, dim=1)).squeeze(1)


def make_model():
    g = torch.Generator().manual_seed(0)
    batch = 4
    inputs = []
    for rows, per_bag in ((20000, 3), (5000, 2), (100, 1)):
        inputs += [torch.randint(0, rows, (batch * per_bag,), generator=g), torch.arange(batch) * per_bag]
    return ThreeTables(), tuple(inputs)
"""

MAX_POOLING_MODEL = """
import torch
from torch import nn


class MaxPooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(100, 8, mode="max")

    def forward(self, ids, offsets):
        return self.emb(ids, offsets).sum(dim=1)


def factory():
    return MaxPooled(), (torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2]))
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def _run_batch(commands: dict[str, list[str]], cwd: Path) -> dict[str, Run]:
    """Run the commands concurrently in `cwd`; stdout/stderr go to files named after each key
    (`KEY.stdout.mlir`: sparselift-opt picks its parser by the file extension)."""
    env = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = {}
    try:
        for key, cmd in commands.items():
            with (cwd / f"{key}.stdout.mlir").open("w") as out, (cwd / f"{key}.stderr").open("w") as err:
                procs[key] = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=env)
        runs = {}
        for key, proc in procs.items():
            rc = proc.wait(timeout=300)
            runs[key] = Run(rc, (cwd / f"{key}.stdout.mlir").read_text(), (cwd / f"{key}.stderr").read_text())
        return runs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _export(*args: str) -> list[str]:
    return [SPARSELIFT, "export", *args]


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> tuple[Path, dict[str, Run]]:
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "user_model.py").write_text(USER_MODEL)
    (tmp / "max_model.py").write_text(MAX_POOLING_MODEL)
    (tmp / "bad_plan.json").write_text('{"world_size": 2}\n')
    first = {
        f"builtin-{name}": _export("--model", name, "--world-size", "2", "--rows-cap", "200", "--batch-size", "4")
        for name in MODEL_NAMES
    }
    first |= {
        "user": _export(
            "user_model.py:make_model", "--world-size", "2", "-o", "user.mlir", "--plan-json", "plan.json", "-v"
        ),
        "unknown-model": _export("--model", "dlrm-nope", "--world-size", "2"),
        "missing-file": _export("no_such_model.py:factory", "--world-size", "2"),
        "missing-factory": _export("user_model.py:no_such_factory", "--world-size", "2"),
        "max-pooling": _export("max_model.py:factory", "--world-size", "2"),
        "bad-sharding": _export("--model", "two-tower", "--world-size", "2", "--sharding", "diagonal"),
        "bad-plan": _export("--model", "two-tower", "--world-size", "2", "--sharding", "bad_plan.json"),
        "collection": _export(COLLECTION, "--world-size", "2", "--batch-size", "8", "--max-length", "hist=6"),
        "collection-short": _export(COLLECTION, "--world-size", "2", "--batch-size", "8", "--max-length", "hist=2"),
        "bad-max-length": _export(COLLECTION, "--world-size", "2", "--max-length", "hist"),
    }
    runs = _run_batch(first, tmp)
    second = {
        "from-plan": _export(
            "user_model.py:make_model", "--world-size", "2", "--sharding", "plan.json", "-o", "user_from_plan.mlir"
        ),
        "plan-other-world": _export("user_model.py:make_model", "--world-size", "3", "--sharding", "plan.json"),
        "opt-user": [SPARSELIFT_OPT, "user.mlir", "-p", "lift-sparse"],
    }
    second |= {f"opt-{name}": [SPARSELIFT_OPT, f"builtin-{name}.stdout.mlir"] for name in MODEL_NAMES}
    runs |= _run_batch(second, tmp)
    return tmp, runs


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_builtin_model_prints_ir_that_sparselift_opt_parses(cli, name):
    _, runs = cli
    export, parsed = runs[f"builtin-{name}"], runs[f"opt-{name}"]
    assert export.returncode == 0, export.stderr[-3000:]
    assert export.stdout.startswith("builtin.module {")
    assert "sched.step @step world_size = 2" in export.stdout
    assert "sparse.embedding_bag_collection" in export.stdout
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    assert parsed.stdout == export.stdout  # parse + print is the identity on exported IR


def test_output_file_plan_json_and_verbose(cli):
    tmp, runs = cli
    user = runs["user"]
    assert user.returncode == 0, user.stderr[-3000:]
    assert user.stdout == ""  # -o: the IR goes to the file, not to stdout
    text = (tmp / "user.mlir").read_text()
    assert text.startswith("builtin.module {")
    for group in ("big/row_wise", "mid/table_wise", "small/data_parallel"):
        assert f'{{group = "{group}"}}' in text
    plan = ShardingPlan.from_json((tmp / "plan.json").read_text())
    assert plan.world_size == 2
    assert {n: p.kind for n, p in plan.tables.items()} == {
        "big": PlacementKind.ROW_WISE,
        "mid": PlacementKind.TABLE_WISE,
        "small": PlacementKind.DATA_PARALLEL,
    }
    assert "sharding plan for world size 2:" in user.stderr  # -v
    lifted = runs["opt-user"]
    assert lifted.returncode == 0, lifted.stderr[-3000:]
    assert "sparse.embedding_bag_collection" not in lifted.stdout
    assert "coll.reduce_scatter" in lifted.stdout


def test_plan_json_is_accepted_back_and_gives_identical_ir(cli):
    tmp, runs = cli
    run = runs["from-plan"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp / "user_from_plan.mlir").read_text() == (tmp / "user.mlir").read_text()


def test_plan_for_another_world_size_is_rejected(cli):
    run = cli[1]["plan-other-world"]
    assert run.returncode != 0
    assert "the sharding plan is for world size 2, not 3" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "key, message",
    [
        ("unknown-model", "argument --model: invalid choice: 'dlrm-nope'"),
        ("missing-file", "model file not found: no_such_model.py"),
        ("missing-factory", "user_model.py has no attribute 'no_such_factory'; callables there:"),
        ("max-pooling", "module 'emb', table 'emb.weight': max pooling is not supported (supported: sum, mean)"),
        (
            "bad-sharding",
            "--sharding must be one of auto, table_wise, row_wise, data_parallel or a plan JSON "
            "file; 'diagonal' is neither",
        ),
        ("bad-plan", "--sharding bad_plan.json is not a valid sharding plan: missing key 'tables'"),
        (
            "collection-short",
            "module 'ec', table 'ec.embeddings.item', feature 'hist': max_lengths['hist'] is 2, but the example "
            "inputs hold a bag of 4 ids",
        ),
        ("bad-max-length", "argument --max-length: expected KEY=N with N a positive integer, got 'hist'"),
    ],
)
def test_errors_exit_non_zero_with_a_clear_message(cli, key, message):
    run = cli[1][key]
    assert run.returncode != 0
    assert run.stdout == ""
    assert message in " ".join(run.stderr.split()), run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_max_length_sets_a_jagged_keys_positions(cli):
    run = cli[1]["collection"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert '#sparse.feature<"hist[5]" -> "ec.embeddings.item", pooling_factor = 0.0>' in run.stdout
    assert '"hist[6]"' not in run.stdout


def test_help_lists_the_builtin_models():
    run = subprocess.run([SPARSELIFT, "export", "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    for name in MODEL_NAMES:
        assert name in run.stdout
    assert "path/to/file.py:factory" in " ".join(run.stdout.split())
