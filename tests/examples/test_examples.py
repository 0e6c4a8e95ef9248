"""The scripts in examples/, run at a small size as a user runs them (python, or torchrun with 2
gloo ranks on 127.0.0.1), so they never rot. Each asserts on what the script prints."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from sparselift.runtime.distributed import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("movielens_dlrm", "torchrec_model", "sequence_din", "criteo_tsv")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """A plan cache of the module's own (a resumed run reuses the plan of the run it resumes), and
    one thread a process: on a busy 2-core machine a second OpenMP thread stalls every op."""
    return dict(os.environ, SPARSELIFT_CACHE_DIR=str(tmp_path_factory.mktemp("plans")), OMP_NUM_THREADS="1")


def run(env: dict[str, str], example: str, *args: str, ranks: int = 1, timeout: float = 120) -> str:
    """Run `examples/<example>.py` from the repository root (under torchrun for `ranks` > 1); its
    stdout, after checking that it exited 0."""
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}"]
        launcher += ["--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    cmd = [*launcher, f"examples/{example}.py", *map(str, args)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def aucs(stdout: str) -> list[float]:
    return [float(a) for a in re.findall(r"AUC (\d+\.\d+)", stdout)]


def epoch_lines(stdout: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^epoch (\d+): train loss .*$", stdout, re.M)}


def test_movielens_dlrm_two_ranks_checkpoint_and_resume(env, movielens_data, tmp_path):
    """Two epochs on 2 ranks with a checkpoint after each; then a run resumed from the first
    epoch's checkpoint trains only the second and ends exactly where the uninterrupted run did."""
    common = ("--data-dir", movielens_data, "--batch-size", 32, "--epochs", 2)
    ckpt = tmp_path / "ckpt"
    full = run(env, "movielens_dlrm", *common, "--checkpoint", ckpt, ranks=2)
    lines = epoch_lines(full)
    assert sorted(lines) == [1, 2], full
    assert all(a > 0.5 for a in aucs(full)) and len(aucs(full)) == 2, full
    for epoch in (1, 2):
        assert f"saved checkpoint {ckpt / f'epoch-{epoch}'}" in full
        assert (ckpt / f"epoch-{epoch}" / ".metadata").is_file() and (ckpt / f"epoch-{epoch}" / "trainer.pt").is_file()

    resumed = run(env, "movielens_dlrm", *common, "--resume", ckpt / "epoch-1", ranks=2)
    assert f"resumed from {ckpt / 'epoch-1'} after epoch 1" in resumed
    assert sorted(epoch_lines(resumed)) == [2], resumed  # epoch 1 is not trained again
    # The same weights, optimizer states, step counts and learning rates: the same epoch 2.
    assert epoch_lines(resumed)[2] == lines[2], (resumed, full)


def test_movielens_dlrm_without_data_says_make_data(env, tmp_path):
    cmd = [sys.executable, "examples/movielens_dlrm.py", "--data-dir", str(tmp_path / "absent")]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    assert "make data" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_torchrec_model_two_ranks(env):
    out = run(env, "torchrec_model", "--steps", 40, "--batch-size", 64, ranks=2)
    assert "step 40: loss" in out, out
    assert aucs(out)[0] > 0.7, out


def test_sequence_din(env):
    out = run(env, "sequence_din", "--steps", 200, "--batch-size", 64)
    assert "step 200: loss" in out, out
    assert aucs(out)[0] > 0.6, out


def test_criteo_tsv(env, criteo_files):
    train, test = criteo_files
    out = run(env, "criteo_tsv", "--files", train, "--test-file", test, "--rows", 1000, "--batch-size", 128)
    assert "epoch 1: 23 steps" in out, out  # 3000 lines, batches of 128, the last partial one dropped
    assert re.search(r"epoch 1: test AUC \d\.\d+ on 600 samples", out), out
    assert aucs(out)[0] > 0.7, out


@pytest.mark.parametrize("example", EXAMPLES)
def test_help(example, capsys, monkeypatch):
    """`--help` prints the usage and the module docstring (how to run the example); in this
    process, as torch is imported already."""
    monkeypatch.setattr(sys, "argv", [f"examples/{example}.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(REPO / "examples" / f"{example}.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("usage:") and f"examples/{example}.py" in out, out
