"""`sparselift simulate`, driven like a user drives it: files, exit codes, messages.

The runs call `main` in-process (one torch import for the two that export a model, in a module
fixture); one bad-input case runs as a subprocess to see the exit code and stderr a shell sees.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparselift.passes.simulate import STAGES
from sparselift.tools.cli import main

SPARSELIFT = str(Path(sys.executable).parent / "sparselift")
SMALL = ["--model", "dlrm-kaggle", "--rows-cap", "2000", "--batch-size", "64"]  # fast to export


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, Run]]:
    tmp = tmp_path_factory.mktemp("simulate")
    fit = tmp / "fit.json"
    fit.write_text(json.dumps({"inter_node_bw_gbps": 20.0, "coll_alpha_us": 30}))
    commands = {
        "sweep": [
            *SMALL,
            "--profile",
            "h100-nccl",
            "--world-size",
            "64",
            "--sweep",
            "8,16,...,4096",
            "--calibration",
            str(fit),
            "--json",
            str(tmp / "out.json"),
            "--png",
            str(tmp / "out.png"),
        ],
        "plain": [*SMALL, "--profile", "h200-nccl", "--world-size", "64", "--ranks-per-node", "64"],
    }
    done = {}
    for key, args in commands.items():
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["simulate", *args])
        done[key] = Run(code, out.getvalue(), err.getvalue())
    return tmp, done


def test_sweep_writes_documented_json(runs):
    tmp, done = runs
    run = done["sweep"]
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads((tmp / "out.json").read_text())
    assert data["simulated"] is True
    assert data["model"] == "dlrm-kaggle" and data["profile"] == "h100-nccl"
    assert data["batch_per_rank"] == 64 and data["rows_cap"] == 2000 and data["headline_world_size"] == 64
    assert [r["world_size"] for r in data["rows"]] == [2**k for k in range(3, 13)]
    for row in data["rows"]:
        assert set(row["breakdown"]) == set(STAGES)
        assert sum(row["breakdown"].values()) == pytest.approx(row["step_ms"], abs=1e-5)
        assert row["samples_per_s"] == pytest.approx(row["world_size"] * 64 / (row["step_ms"] / 1e3), rel=1e-4)
    steps = [r["step_ms"] for r in data["rows"]]
    assert steps == sorted(steps)
    # The calibration's fitted values replace the profile's, and the output says so.
    assert data["calibration"] == str(tmp / "fit.json") and data["calibrated_fields"] == [
        "coll_alpha_us",
        "inter_node_bw_gbps",
    ]
    assert data["profile_fields"]["inter_node_bw_gbps"] == 20.0 and data["profile_fields"]["net_bw_gbps"] == 350.0
    assert "fit.json" in data["cost_source"] and "inter_node_bw_gbps" in data["cost_source"]
    assert run.stdout.startswith("SIMULATED")
    assert f"fitted values from {tmp / 'fit.json'}" in run.stdout


def test_sweep_png_opens(runs):
    import matplotlib.image

    tmp, done = runs
    assert done["sweep"].returncode == 0, done["sweep"].stderr[-3000:]
    image = matplotlib.image.imread(tmp / "out.png")
    assert image.ndim == 3 and image.shape[0] >= 300 and image.shape[1] >= 600 and image.shape[2] in (3, 4)


def test_plain_run_prints_one_labelled_row(runs):
    _, done = runs
    run = done["plain"]
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("SIMULATED") and "h200-nccl" in lines[0]
    assert "no --calibration given" in run.stdout
    assert "64 ranks per node" in run.stdout
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["world", "nodes"])
    row = lines[header + 1].split()
    assert row[:2] == ["64", "1"]
    assert len(lines) == header + 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-size", "64", "--profile", "tpu-v9"], "unknown hardware profile 'tpu-v9'"),
        (["--world-size", "0"], "world size must be at least 1"),
        (["--world-size", "-8"], "world size must be at least 1"),
        (["--world-size", "1000000"], "above the simulated maximum"),
        (["--sweep", "8,abc"], "'abc' is not a world size"),
        (["--sweep", "8,16,...,100"], "does not reach 100"),
        ([], "give --world-size N, --sweep"),
        (["--world-size", "8", "--ranks-per-node", "0"], "ranks_per_node"),
        (["--world-size", "8", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--world-size", "8", "--calibration", "no_such_fit.json"], "cannot read"),
    ],
)
def test_bad_input_is_a_message_and_exit_code_2(capsys, args, message):
    assert main(["simulate", "--model", "dlrm-kaggle", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparselift simulate: ") and message in err
    assert "Traceback" not in err


def test_bad_calibration_fields_are_named(tmp_path, capsys):
    fit = tmp_path / "fit.json"
    fit.write_text('{"mem_bw": 1}')
    assert main(["simulate", "--model", "dlrm-kaggle", "--world-size", "8", "--calibration", str(fit)]) == 2
    assert "unknown field 'mem_bw'" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--world-size", "eight"], ["--model", "dlrm-nope", "--world-size", "8"]])
def test_argparse_errors_exit_2(capsys, args):
    with pytest.raises(SystemExit) as e:
        main(["simulate", *args])
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_bad_input_from_the_shell_has_no_traceback():
    run = subprocess.run(
        [SPARSELIFT, "simulate", "--model", "dlrm-kaggle", "--world-size", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "world size must be at least 1" in run.stderr and "Traceback" not in run.stderr
