"""Quiet by default: a compile prints none of torch's or torchrec's unactionable warnings, and a
failed export says why and where in the user's code in a few lines (SPARSELIFT_DEBUG=1: all)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import sparselift
from sparselift.frontend.errors import ExportError

NOISE = (
    "is_fx_tracing will return true for both fx.symbolic_trace and torch.export",
    "Trying to non-strict torch.export KJT to_dict, which is extremely slow",
)
MARK = "--- compile starts ---"
# A TorchRec EBC model, built (which constructs a KJT) before the compile; torch warns about
# is_fx_tracing once per process, so its once-cache is cleared to see whether compile warns.
COMPILE_TORCHREC = textwrap.dedent(
    f"""
    import sys
    import torch.fx._symbolic_trace as symbolic_trace
    import sparselift
    from sparselift.models import build

    model, inputs = build("torchrec-ebc", batch_size=8)
    symbolic_trace.is_fx_tracing_warning.cache_clear()
    print({MARK!r}, file=sys.stderr, flush=True)
    options = sparselift.CompileOptions(cache_dir=sys.argv[1], plan="none", kernels="reference")
    compiled = sparselift.compile(model, inputs, options=options)
    compiled(*inputs).sum().backward()
    """
)


def _compile_stderr(tmp_path, debug: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SPARSELIFT_DEBUG"}
    if debug:
        env["SPARSELIFT_DEBUG"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", COMPILE_TORCHREC, str(tmp_path)], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr.split(MARK, 1)[1]


@pytest.mark.timeout(480)
def test_compiling_a_torchrec_model_prints_no_torch_or_torchrec_warnings(tmp_path):
    quiet = _compile_stderr(tmp_path, debug=False)
    for noise in NOISE:
        assert noise not in quiet, quiet
    # The same compile with SPARSELIFT_DEBUG=1 shows them: the capture above could see them.
    loud = _compile_stderr(tmp_path, debug=True)
    for noise in NOISE:
        assert noise in loud, loud


class _DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(20, 4, mode="sum")
        self.out = nn.Linear(4, 1)

    def forward(self, ids, offsets):
        x = self.emb(ids, offsets)
        if x.sum() > 0:  # export cannot branch on a value: the user's line the error must name
            x = x * 2
        return self.out(x)


class _WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(20, 4, mode="sum")
        self.out = nn.Linear(5, 1)

    def forward(self, ids, offsets):
        x = self.emb(ids, offsets)
        return self.out(x)  # 4 columns into a Linear(5, 1): the user's line the error must name


def _line_of(cls, marker: str) -> int:
    lines, start = inspect.getsourcelines(cls.forward)
    return start + next(i for i, line in enumerate(lines) if marker in line)


@pytest.mark.parametrize(
    "model, marker, reason",
    [
        (_DataDependent, "if x.sum() > 0:", "Could not guard on data-dependent expression"),
        (_WrongShape, "return self.out(x)", "a and b must have same reduction dim"),
    ],
)
def test_a_failed_export_names_the_reason_and_the_user_line_in_a_few_lines(model, marker, reason, capfd, monkeypatch):
    monkeypatch.delenv("SPARSELIFT_DEBUG", raising=False)
    inputs = (torch.arange(8) % 20, torch.arange(0, 8, 2))
    capfd.readouterr()
    with pytest.raises(ExportError) as info:
        sparselift.compile(model(), inputs, options=sparselift.CompileOptions(plan="none"))
    message = str(info.value)
    assert len(message.splitlines()) <= 4, message
    assert message.splitlines()[0].startswith(f"torch.export failed for model '{model.__name__}': {reason}")
    assert f'File "{__file__}", line {_line_of(model, marker)}, in forward' in message, message
    assert info.value.__cause__ is None  # torch's internal frames are not chained in
    printed = capfd.readouterr().err
    assert "def forward(self" not in printed and len(printed.splitlines()) <= 2, printed


def test_sparselift_debug_shows_torch_export_in_full(capfd, monkeypatch):
    monkeypatch.setenv("SPARSELIFT_DEBUG", "1")
    inputs = (torch.arange(8) % 20, torch.arange(0, 8, 2))
    with pytest.raises(ExportError) as info:
        sparselift.compile(_DataDependent(), inputs, options=sparselift.CompileOptions(plan="none"))
    assert "The following call raised this error" in str(info.value)
    assert info.value.__cause__ is not None
    assert "def forward(self" in capfd.readouterr().err  # torch's partial graph
