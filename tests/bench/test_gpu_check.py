"""`sparselift bench gpu`: what it does without a GPU, and the report of the recorded H200 run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench" / "gpu-h200.json"


@pytest.mark.skipif("__import__('torch').cuda.is_available()", reason="a GPU is here: the check would run")
def test_without_a_gpu_it_says_so_and_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "sparselift.tools.cli", "bench", "gpu", "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr


def test_recorded_h200_run_passed_every_section_and_renders():
    from sparselift.bench.gpu import FLOOR_FRACTION, format_report

    doc = json.loads(RECORD.read_text())
    assert doc["machine"]["gpu"].startswith("NVIDIA")
    for section in ("copy", "correctness", "kernels", "training"):
        assert doc[section]["ok"], section
    uniform = [c for c in doc["kernels"]["cases"] if c["uniform_ids"]]
    assert uniform and all(c["fwd_kernel_share_of_copy_bw"] >= FLOOR_FRACTION for c in uniform)
    assert len(doc["training"]["runs"]) == 5
    report = format_report(doc)
    assert "overall: ok" in report
    assert "8x1M x128 uniform | triton" in report and "hide-latency | yes" in report
