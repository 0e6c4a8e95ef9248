"""`sparselift`'s error policy, driven like a user drives it: one line, a non-zero exit, and the
Python traceback only on request (`--traceback` before or after the subcommand, or
SPARSELIFT_TRACEBACK=1); argparse's usage errors unchanged.

Every command imports torch (seconds), so they run concurrently in one module fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPARSELIFT = str(Path(sys.executable).parent / "sparselift")

FACTORIES = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(10, 4, mode="sum")

    def forward(self, ids, offsets):
        return self.emb(ids, offsets).sum(dim=1)


def tiny():
    return Tiny(), (torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2]))


def boom():
    raise RuntimeError("boom in the factory")
"""

BOOM = "sparselift export: unexpected error: RuntimeError: boom in the factory"
HINT = " (rerun with --traceback or SPARSELIFT_TRACEBACK=1 for the traceback)"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "factories.py").write_text(FACTORIES)
    env = {k: v for k, v in os.environ.items() if k != "SPARSELIFT_TRACEBACK"}
    commands = {
        "boom": ([SPARSELIFT, "export", "factories.py:boom", "--world-size", "1"], {}),
        "boom-flag": ([SPARSELIFT, "export", "factories.py:boom", "--world-size", "1", "--traceback"], {}),
        "boom-flag-first": ([SPARSELIFT, "--traceback", "export", "factories.py:boom", "--world-size", "1"], {}),
        "boom-env": ([SPARSELIFT, "export", "factories.py:boom", "--world-size", "1"], {"SPARSELIFT_TRACEBACK": "1"}),
        "unwritable": (
            [SPARSELIFT, "export", "factories.py:tiny", "--world-size", "1", "-o", "missing/dir/m.mlir"],
            {},
        ),
        "usage": ([SPARSELIFT, "export", "factories.py:tiny", "--world-size", "two"], {}),
    }
    procs = {
        key: subprocess.Popen(cmd, cwd=tmp, env=env | extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for key, (cmd, extra) in commands.items()
    }
    out = {}
    try:
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            out[key] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return out


def test_unexpected_error_is_one_line_with_a_hint(runs):
    run = runs["boom"]
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr == BOOM + HINT + "\n"


@pytest.mark.parametrize("key", ["boom-flag", "boom-flag-first", "boom-env"])
def test_traceback_on_request(runs, key):
    run = runs[key]
    assert run.returncode == 1
    assert run.stderr.startswith("Traceback (most recent call last):")
    assert 'raise RuntimeError("boom in the factory")' in run.stderr
    assert run.stderr.endswith(BOOM + "\n")


def test_os_error_is_one_line(runs):
    run = runs["unwritable"]
    assert run.returncode == 1
    assert run.stderr == "sparselift export: error: No such file or directory: missing/dir/m.mlir\n"


def test_usage_errors_stay_argparse_ones(runs):
    run = runs["usage"]
    assert run.returncode == 2
    assert run.stderr.startswith("usage: sparselift export")
    assert "argument --world-size: invalid int value: 'two'" in run.stderr
    assert "Traceback" not in run.stderr
