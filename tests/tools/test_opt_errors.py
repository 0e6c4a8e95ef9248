"""`sparselift-opt`'s errors, driven like a user drives it: one message, exit 1, no traceback.

Each case runs the installed entry point in a subprocess (no torch: under a second each) and
checks the whole message, so a regression to xDSL's tracebacks or to its module dump fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPARSELIFT_OPT = str(Path(sys.executable).parent / "sparselift-opt")
INPUTS = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"
TWO_TOWER = str(INPUTS / "two-tower-ws2.mlir")
KAGGLE = str(INPUTS / "dlrm-kaggle-ws2.mlir")
KNOWN = (
    "lift-sparse, aggregate-comm, compact-rows, dedup-ids, generate-kernels, parallelize-tables, hide-latency, "
    "print-srsv, annotate-cost, plan-sparse, canonicalize, cse, dce"
)


def opt(*args: str, cwd: Path | None = None, env: dict | None = None, stdin: str | None = None):
    environ = {k: v for k, v in os.environ.items() if k != "SPARSELIFT_TRACEBACK"} | (env or {})
    return subprocess.run(
        [SPARSELIFT_OPT, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=environ, input=stdin
    )


def assert_one_error(run, message: str) -> None:
    """Exit 1, nothing on stdout, exactly `message` (and a newline) on stderr."""
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert run.stderr == message + "\n"


@pytest.fixture(scope="module")
def lifted(tmp_path_factory) -> dict[str, Path]:
    """dlrm-kaggle and two-tower after lift-sparse (and generate-kernels), as files to edit."""
    tmp = tmp_path_factory.mktemp("opt-errors")
    out = {}
    for key, src, passes in (
        ("kaggle", KAGGLE, "lift-sparse"),
        ("two-tower", TWO_TOWER, "lift-sparse"),
        ("kaggle-kernels", KAGGLE, "lift-sparse,generate-kernels"),
    ):
        run = opt(src, "-p", passes)
        assert run.returncode == 0, run.stderr
        out[key] = tmp / f"{key}.mlir"
        out[key].write_text(run.stdout)
    return out


def _edit_line(src: Path, dst: Path, marker: str, old: str, new: str) -> int:
    """Copy `src` to `dst` with `old` -> `new` on the first line holding `marker` and `old`; its number."""
    lines = src.read_text().split("\n")
    number = next(i for i, line in enumerate(lines) if marker in line and old in line)
    lines[number] = lines[number].replace(old, new)
    dst.write_text("\n".join(lines))
    return number + 1


def test_unknown_pass_lists_the_known_ones_and_suggests_the_closest():
    run = opt(TWO_TOWER, "-p", "lift-sparse,agregate-comm")
    assert_one_error(
        run,
        f"sparselift-opt: error: unknown pass 'agregate-comm' (did you mean 'aggregate-comm'?); known passes: {KNOWN}",
    )


def test_bad_option_value_names_pass_option_and_type():
    run = opt(TWO_TOWER, "-p", "lift-sparse,parallelize-tables{groups=abc}")
    assert_one_error(
        run, "sparselift-opt: error: pass 'parallelize-tables': option 'groups' expects an integer, got 'abc'"
    )


def test_out_of_range_share_names_the_pass_and_option():
    run = opt(TWO_TOWER, "-p", "lift-sparse,compact-rows{min-empty-share=1.5}")
    assert_one_error(run, "sparselift-opt: error: compact-rows: min-empty-share is a share of bags, got 1.5")


@pytest.mark.parametrize("spelling", ["max-workspace-bytes", "max_workspace_bytes"])
def test_bad_option_value_names_the_option_hyphenated(spelling):
    run = opt(TWO_TOWER, "-p", f"lift-sparse,parallelize-tables{{{spelling}=lots}}")
    assert_one_error(
        run,
        "sparselift-opt: error: pass 'parallelize-tables': option 'max-workspace-bytes' expects an integer, got 'lots'",
    )


def test_unknown_option_lists_the_pass_options_hyphenated():
    run = opt(TWO_TOWER, "-p", "lift-sparse,parallelize-tables{max-workspace=3}")
    assert_one_error(
        run,
        "sparselift-opt: error: pass 'parallelize-tables' has no option 'max-workspace' (did you "
        "mean 'max-workspace-bytes'?); its options: groups, max-workspace-bytes, backend, batch",
    )


def test_list_option_expects_a_list():
    run = opt(TWO_TOWER, "-p", "lift-sparse,plan-sparse{optimizations=1,2}")
    assert_one_error(
        run,
        "sparselift-opt: error: pass 'plan-sparse': option 'optimizations' expects a "
        "comma-separated list of strings, got '1,2'",
    )


def test_malformed_pipeline_shows_where():
    run = opt(TWO_TOWER, "-p", "lift-sparse,parallelize-tables{groups=2")
    assert_one_error(
        run,
        "sparselift-opt: error: malformed pass pipeline at column 40: Malformed pass arguments, "
        "expected either a space or `}` here\n"
        "  lift-sparse,parallelize-tables{groups=2\n"
        "  " + " " * 39 + "^",
    )


def test_missing_input_file_is_one_line(tmp_path):
    assert_one_error(opt("x.mlir", cwd=tmp_path), "sparselift-opt: error: no such file: x.mlir")


KINDS = "sgd, adagrad, rowwise_adagrad, adam, adamw, partial_rowwise_adam"


def test_a_pass_rejecting_its_options_is_named():
    run = opt(TWO_TOWER, "-p", "lift-sparse{optimizer=rmsprop}")
    assert_one_error(run, f"sparselift-opt: error: lift-sparse: unknown optimizer 'rmsprop'; expected one of {KINDS}")


def test_parse_error_is_located():
    run = opt(stdin="builtin.module {\n  sched.step @s world_size = two outputs = 0 {\n")
    assert_one_error(
        run,
        "stdin:2:30: error: Expected integer literal\n"
        "  sched.step @s world_size = two outputs = 0 {\n"
        "                             ^^^",
    )


def test_verifier_failure_prints_the_op_and_its_location_not_the_module(lifted, tmp_path):
    """The issue's gap: a lookup on a table no feature reaches (table and placement renamed
    together) used to verify, pass generate-kernels and print-srsv, and kill plan-module with
    KeyError: 'emb_l.3'. It is now rejected on input, in two lines instead of 15 KB."""
    bad = tmp_path / "renamed.mlir"
    line = _edit_line(lifted["kaggle"], bad, "sparse.lookup %", '"emb_l.3"', '"emb_l.3x"')
    source = bad.read_text().split("\n")[line - 1].strip()
    message = (
        f"{bad}:{line}:5: error: sparse.lookup of table 'emb_l.3x': no sparse.route of @step routes a "
        f"feature to table 'emb_l.3x' (no feature reads it)\n  {source}"
    )
    for passes in ("generate-kernels", "print-srsv"):
        assert_one_error(opt(str(bad), "-p", passes), message)
    assert_one_error(opt(str(bad), "-t", "plan-module"), message)
    assert len(message) < 1000


def test_kernel_slot_beyond_the_segment_is_rejected(lifted, tmp_path):
    bad = tmp_path / "slot.mlir"
    line = _edit_line(lifted["kaggle-kernels"], bad, "= sparse.fused_lookup %", "array<i64: 7>]", "array<i64: 70>]")
    run = opt(str(bad), "-t", "plan-module")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    head = run.stderr.split("\n")[0]
    assert head.startswith(f"{bad}:{line}:5: error: sparse.fused_lookup, table '")
    assert "': slots [70], but the sparse.route of group 'emb_l/table_wise' puts feature '" in head
    assert "at slots [7] of rank " in head
    assert len(run.stderr.split("\n")) == 3  # message, the op's line, end


def test_verify_diagnostics_prints_the_located_message_and_exits_zero(lifted, tmp_path):
    bad = tmp_path / "renamed.mlir"
    line = _edit_line(lifted["two-tower"], bad, "sparse.lookup %", '"user.emb.0"', '"user.emb.X"')
    run = opt(str(bad), "--verify-diagnostics")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{bad}:{line}:5: error: sparse.lookup of table 'user.emb.X': no sparse.route")
    assert "builtin.module" not in run.stdout and len(run.stdout.split("\n")) == 3


@pytest.mark.parametrize("how", ["flag", "env"])
def test_traceback_on_request(how):
    args, env = (["--traceback"], None) if how == "flag" else ([], {"SPARSELIFT_TRACEBACK": "1"})
    run = opt(TWO_TOWER, "-p", "lift-sparse{optimizer=rmsprop}", *args, env=env)
    assert run.returncode == 1
    assert run.stderr.startswith("Traceback (most recent call last):")
    assert run.stderr.endswith(
        f"sparselift-opt: error: lift-sparse: unknown optimizer 'rmsprop'; expected one of {KINDS}\n"
    )


def test_usage_errors_stay_argparse_ones():
    run = opt(TWO_TOWER, "--no-such-flag")
    assert run.returncode == 2
    assert "usage: sparselift-opt" in run.stderr and "unrecognized arguments: --no-such-flag" in run.stderr


def test_an_op_without_location_is_printed_with_the_nearest_located_op(lifted):
    """An op a pass created has no place in the input: it is printed, with where its step is."""
    from xdsl.dialects.builtin import DenseArrayBase, i64
    from xdsl.utils.exceptions import VerifyException

    from sparselift.ir import make_context
    from sparselift.tools.opt_diagnostics import LocatingParser, verify_error

    locations = {}
    module = LocatingParser(make_context(), lifted["two-tower"].read_text(), "m.mlir", locations).parse_module()
    lookup = next(op for op in module.walk() if op.name == "sparse.lookup")
    made = lookup.clone()  # as a pass would make it: not parsed, so no location
    made.properties["slots"] = DenseArrayBase.from_list(i64, [5])
    lookup.parent_block().insert_op_after(made, lookup)
    with pytest.raises(VerifyException) as raised:
        module.verify()
    lines = str(verify_error(raised.value, module, locations, {}, "generate-kernels")).split("\n")
    assert lines[0] == (
        "sparselift-opt: error: sparse.lookup of table 'user.emb.0': slots [5], but the sparse.route "
        "of group 'user/table_wise' puts feature 'user_indices_0' of this table at slots [0] of rank "
        "1's segment (2 features) (in the IR that pass 'generate-kernels' produced)"
    )
    assert lines[1].startswith('  %0 = sparse.lookup %1, %2 table = #sparse.table<"user.emb.0"')
    assert lines[2] == "  inside sched.step at m.mlir:2:3"
    assert len(lines) == 3
