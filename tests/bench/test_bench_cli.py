"""`sparselift bench dlrm` and `bench quality` as a user runs them: tables, JSON keys, a PNG that opens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

CLI = [sys.executable, "-m", "sparselift.tools.cli"]


@pytest.fixture(scope="module")
def dlrm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = CLI + [
        "bench",
        "dlrm",
        "--model",
        "dlrm-kaggle",
        "--world-size",
        "2",
        "--rows-cap",
        "500",
        "--batch-size",
        "32",
        "--steps",
        "2",
        "--rounds",
        "2",
        "--warmup",
        "1",
        "--host-memory",
        "retain",
        "--plan-cache",
        str(out / "plans"),
        "--json",
        str(out / "r.json"),
        "--plot",
        str(out / "r.png"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout, json.loads((out / "r.json").read_text()), out / "r.png"


def test_dlrm_bench_prints_one_row_per_system(dlrm_run):
    stdout, _, _ = dlrm_run
    for label in ("DLRM-Baseline", "TorchRec", "SparseLift", "dense-only"):
        assert label in stdout
    assert "sparselift_vs_torchrec" in stdout and "ceiling_vs_torchrec" in stdout
    assert "freed host memory retained (every system)" in stdout  # --host-memory retain
    assert "SparseLift's plan refined in " in stdout  # --plan-cache


def test_dlrm_bench_json_has_every_key(dlrm_run):
    _, result, _ = dlrm_run
    for name in ("baseline", "torchrec", "sparselift"):
        s = result["systems"][name]
        for key in ("step_ms_median", "step_ms_p25", "step_ms_p75", "samples_per_s", "breakdown", "exposed_sparse_ms"):
            assert key in s, (name, key)
        assert set(s["breakdown"]) == {"sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other"}
        assert s["step_ms_p25"] <= s["step_ms_median"] <= s["step_ms_p75"]
        assert s["exposed_sparse_ms"] == pytest.approx(s["step_ms_median"] - result["dense_only_step_ms"])
    for key in ("sparselift_vs_baseline", "sparselift_vs_torchrec", "ceiling_vs_torchrec"):
        assert result["ratios"][key] > 0
    assert result["config"]["world_size"] == 2 and "torch" in result["machine"]
    assert result["config"]["host_memory"] == "retain"
    # The planner's measured verdicts say why SparseLift runs the pipeline it runs.
    plan = result["sparselift_plan"]
    assert plan["pipeline"].startswith("lift-sparse{") and plan["decisions"]
    assert 'replicated_grads="with-dense"' in plan["pipeline"]  # the lowering, with its options
    assert all(d.startswith(("[accepted] ", "[rejected] ")) for d in plan["decisions"])
    assert any(d.startswith("[accepted] codegen") for d in plan["decisions"]) == (
        "generate-kernels" in plan["pipeline"]
    )
    # --plan-cache: the first run has nothing to refine; its record is what the next run goes on with.
    assert plan["planning"].startswith("plan='refine' with nothing to refine, planning: no cached plan")
    assert result["config"]["plan_cache"].endswith("plans")
    assert list(Path(result["config"]["plan_cache"]).glob("plan_record_*.json"))
    # Memory by category and by phase (rank 0's compile; every system's build and first steps).
    assert set(plan["footprint_mb"]) == {
        "tables",
        "optimizer_state",
        "dense_parameters",
        "exchange_buffers",
        "step_buffers",
    }
    assert plan["footprint_mb"]["tables"] > 0
    assert [p["phase"] for p in plan["compile_memory_mb"]] == ["export", "shards", "plan", "build"]
    for s in result["systems"].values():
        phases = s["memory_by_phase_per_rank"]
        assert len(phases) == 2 and all({"setup_peak_mb", "resident_mb", "step_peak_mb"} <= set(p) for p in phases)


def test_dlrm_bench_png_opens(dlrm_run):
    _, _, png = dlrm_run
    from PIL import Image

    with Image.open(png) as img:
        assert img.format == "PNG" and img.size[0] > 600 and img.size[1] > 300


# table_wise: bit for bit against the reference. `auto`'s replicated tables train as one process
# does in the parity tests (tests/runtime/test_parity.py); this CLI test runs once, for time.
@pytest.mark.parametrize("sharding", ["table_wise"])
def test_quality_bench_reports_the_paper_metrics(tmp_path, sharding):
    cmd = CLI + [
        "bench",
        "quality",
        "--model",
        "dlrm-kaggle",
        "--world-size",
        "2",
        "--steps",
        "8",
        "--batch-size",
        "32",
        "--rows-cap",
        "500",
        "--eval-batches",
        "2",
        "--sharding",
        sharding,
        "--json",
        str(tmp_path / "q.json"),
        "--plot",
        str(tmp_path / "q.png"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "q.json").read_text())
    for key in ("auc", "ap", "logloss"):
        assert set(result[key]) == {"baseline", "sparselift"}
    assert result["config"]["sharding"] == sharding
    if sharding == "table_wise":
        # The reference's placement, the same SGD rounding (one fused step per occurrence, in
        # order): the compiled plan trains the reference's model to the last bit.
        assert result["losses"]["baseline"] == result["losses"]["sparselift"]
        assert result["loss_rmse"] == 0.0 and result["auc"]["baseline"] == result["auc"]["sparselift"]
    else:
        # Replicated small tables update from an all-reduced dense gradient: same math, other rounding.
        assert abs(result["auc"]["baseline"] - result["auc"]["sparselift"]) < 1e-3
        assert result["loss_rmse"] < 1e-4
    from PIL import Image

    with Image.open(tmp_path / "q.png") as img:  # three panels: curves, difference, metrics
        assert img.format == "PNG" and img.size[0] > 1200 and img.size[1] > 300
    assert "ROC-AUC" in proc.stdout and "LogLoss" in proc.stdout and f"sharding {sharding}" in proc.stdout


def test_kernel_bench_reports_speedups_over_fbgemm(tmp_path):
    cmd = CLI + [
        "bench",
        "kernels",
        "--quick",
        "--cases",
        "kaggle-onehot",
        "--no-torch",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--json",
        str(tmp_path / "k.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "k.json").read_text())
    (case,) = result["cases"]
    assert case["name"] == "kaggle-onehot"
    assert case["speedup_vs_fbgemm_fwd"] > 0 and case["speedup_vs_fbgemm_fwd_bwd"] > 0


def test_ablation_runs_every_configuration(tmp_path):
    cmd = CLI + [
        "bench",
        "ablation",
        "--model",
        "dlrm-kaggle",
        "--world-size",
        "2",
        "--rows-cap",
        "500",
        "--batch-size",
        "32",
        "--steps",
        "2",
        "--rounds",
        "2",
        "--warmup",
        "1",
        "--json",
        str(tmp_path / "a.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "a.json").read_text())
    configs = [r["config"] for r in result["rows"]]
    assert configs[0] == "unoptimized" and "all four" in configs and len(configs) == 10
    for name in ("aggregate-comm", "parallelize-tables", "generate-kernels", "hide-latency"):
        assert f"+{name}" in configs and f"all four - {name}" in configs
        assert f"all four - {name}" in proc.stdout
    rows = {r["config"]: r for r in result["rows"]}
    assert rows["unoptimized"]["pipeline"] == "lift-sparse" and rows["unoptimized"]["kernels"] == "reference"
    for r in result["rows"]:  # exactly the row's pipeline ran: no planning
        assert _without_lowering_options(r["compiled"]) == r["pipeline"], r
    assert rows["all four"]["pipeline"] == (
        "lift-sparse,aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency"
    )
    for r in result["rows"]:
        assert set(r["breakdown"]) == {"sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other"}
        assert r["step_ms_p25"] <= r["step_ms_median"] <= r["step_ms_p75"] and r["speedup"] > 0
        # Every timed step, for paired analyses across rows (bench/stage_bias.py).
        assert len(r["steps_ms"]) == len(r["stage_steps_ms"]) == 2
        assert set(r["stage_steps_ms"][0]) == set(r["breakdown"])
        assert r["predicted_fwd_bwd_ms"] > 0 and r["cost_model_error_pct"] >= 0
    # The planner's calibrated cost model predicts every row; the error is reported, not asserted.
    errors = sorted(r["cost_model_error_pct"] for r in result["rows"])
    assert result["cost_model"]["median_abs_error_pct"] == pytest.approx((errors[4] + errors[5]) / 2)
    assert "median absolute error" in proc.stdout


def _ablation_of(
    pipelines: dict[str, str], model: str, batch_size: int, json_path, *extra: str
) -> subprocess.CompletedProcess:
    """`bench ablation` of the named pipelines: tiny tables, 2 steps in 2 rounds, no cost model."""
    cmd = CLI + ["bench", "ablation", "--model", model, "--world-size", "2", "--rows-cap", "500", *extra]
    cmd += ["--batch-size", str(batch_size), "--steps", "2", "--rounds", "2", "--warmup", "1", "--no-cost-model"]
    for name, pipeline in pipelines.items():
        cmd += ["--pipeline", f"{name}={pipeline}"]
    proc = subprocess.run(cmd + ["--json", str(json_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _without_lowering_options(compiled: str) -> str:
    """A row's compiled pipeline with lift-sparse's options (the compiler's lowering) dropped."""
    lowering, _, passes = compiled.partition(",")
    assert lowering.startswith("lift-sparse{"), compiled
    return ",".join(["lift-sparse", passes] if passes else ["lift-sparse"])


def test_ablation_of_chosen_pipelines_runs_exactly_those(tmp_path):
    # `--lowering wide=narrow_ids=false`: one row lowered with the model's int64 ids, in the same run.
    pipelines = {
        "kernels": "generate-kernels",
        "after": "generate-kernels,hide-latency{dense-grads=false}",
        "wide": "generate-kernels",
    }
    proc = _ablation_of(pipelines, "dlrm-kaggle", 32, tmp_path / "a.json", "--lowering", "wide=narrow_ids=false")
    rows = json.loads((tmp_path / "a.json").read_text())["rows"]
    assert [(r["config"], _without_lowering_options(r["compiled"]), r["kernels"]) for r in rows] == [
        ("kernels", "lift-sparse,generate-kernels", "generated"),
        ("after", "lift-sparse,generate-kernels,hide-latency{dense-grads=false}", "generated"),
        ("wide", "lift-sparse,generate-kernels", "generated"),
    ]
    assert [("narrow_ids=true" in r["compiled"], r["lowering"]) for r in rows] == [
        (True, {}),
        (True, {}),
        (False, {"narrow_ids": False}),
    ]
    assert rows[0]["speedup"] == 1.0 and "after" in proc.stdout
    # The refusals, run side by side (each is a torch import and an argument check).
    refusals = [
        (["--pipeline", "wide=generate-kernels", "--lowering", "wide=narrow_ids=maybe"], "narrow_ids is true or false"),
        (
            ["--pipeline", "wide=generate-kernels", "--lowering", "wide=rows=sparse"],
            "--lowering 'wide=rows=sparse': 'rows' must be in",
        ),
        (
            ["--pipeline", "wide=generate-kernels", "--lowering", "wide=kernels=reference"],
            "FIELD one of rows, replicated_grads, narrow_ids",
        ),
        (["--pipeline", "generate-kernels"], "expected NAME=PIPELINE"),
        (["--pipeline", "a=generate-kernel"], "unknown pass 'generate-kernel'; known:"),
    ]
    procs = [
        subprocess.Popen(CLI + ["bench", "ablation", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args, _ in refusals
    ]
    for proc, (args, message) in zip(procs, refusals):
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2 and message in stderr, (args, stderr)


def test_ablation_of_the_sequence_model_compiles_din_under_each_pipeline(tmp_path):
    # `--model din` is `bench seq`'s DIN: its unpooled item table travels as per-id rows, so
    # the generated kernels include the rows path, and each row's pipeline is what compiled.
    # `--host-memory retain`, as `bench seq` runs it (and its planner calibrates).
    # `--sharding rw=PLAN.json`: one row compiled with the item table row-wise, in the same run.
    pipelines = {"gk": "generate-kernels", "agg": "aggregate-comm,generate-kernels", "rw": "generate-kernels"}
    plan = {"item": {"kind": "row_wise", "ranks": [0, 1], "row_bounds": [0, 250, 500]}}
    plan |= {"cat": {"kind": "data_parallel"}, "user": {"kind": "table_wise", "ranks": [1]}}
    (tmp_path / "rw.json").write_text(json.dumps({"world_size": 2, "tables": plan}))
    extra = ("--host-memory", "retain", "--sharding", f"rw={tmp_path / 'rw.json'}")
    proc = _ablation_of(pipelines, "din", 16, tmp_path / "din.json", *extra)
    result = json.loads((tmp_path / "din.json").read_text())
    assert result["config"]["model"] == "din" and result["config"]["batch_size"] == 16
    assert result["config"]["host_memory"] == "retain" and "freed host memory retained" in proc.stdout
    assert [(r["config"], _without_lowering_options(r["compiled"])) for r in result["rows"]] == [
        ("gk", "lift-sparse,generate-kernels"),
        ("agg", "lift-sparse,aggregate-comm,generate-kernels"),
        ("rw", "lift-sparse,generate-kernels"),
    ]
    assert all(r["step_ms_median"] > 0 for r in result["rows"]), result["rows"]
    items = [(r["sharding"] == "auto", r["placed"]["tables"]["item"]["kind"]) for r in result["rows"]]
    assert items == [(True, "table_wise"), (True, "table_wise"), (False, "row_wise")]
    named = subprocess.run(
        CLI + ["bench", "ablation", "--pipeline", "a=generate-kernels", "--sharding", "b=row_wise"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert named.returncode == 2 and "expected NAME=SHARDING once for a --pipeline row's NAME" in named.stderr


def test_ablation_rejects_one_rank():
    proc = subprocess.run(CLI + ["bench", "ablation", "--world-size", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--world-size must be at least 2" in proc.stderr


def test_ops_bench_times_every_plan_op(tmp_path):
    # rows cap 2000: some tables are exchanged (table-wise), the smallest replicated.
    cmd = CLI + [
        "bench",
        "ops",
        "--model",
        "dlrm-kaggle",
        "--world-size",
        "2",
        "--rows-cap",
        "2000",
        "--batch-size",
        "32",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--host-memory",
        "retain",
        "--json",
        str(tmp_path / "o.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "o.json").read_text())
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    # The allocator policy of `bench seq` and `bench dlrm`, so per-op times compare with theirs.
    assert result["config"]["host_memory"] == "retain" and "freed host memory retained" in proc.stdout
    for r in result["ranks"]:
        ops = r["ops_ms_per_step"]
        # The generated plan's route, fused kernels and dense regions all ran and were timed.
        for name in ("route", "fused_lookup", "fused_lookup_update", "fused_lookup_grad"):
            assert ops[name] > 0, (name, ops)
        # Dense regions by name, exchanges by role: where the time goes, not only which op.
        dense = {k: v for k, v in ops.items() if k.startswith("PlanBase.dense[")}
        assert {"PlanBase.dense[sparse_inputs]", "PlanBase.dense[dense_post]"} <= set(dense), ops
        assert 0 < sum(dense.values()) < r["step_ms_median"]
        roles = {k.split("[")[1].rstrip("]") for k in ops if k.startswith("all_to_all")}
        assert {"output_pooled", "grad_pooled"} <= roles, ops
    assert "step (median)" in proc.stdout and "fused_lookup_update" in proc.stdout


def test_ops_bench_takes_a_sharding_plan_file(tmp_path, capsys):
    from sparselift.bench.ops import build_parser
    from sparselift.placement import PlacementKind, ShardingPlan

    plan = {"world_size": 2, "tables": {"item": {"kind": "row_wise", "ranks": [0, 1], "row_bounds": [0, 5, 10]}}}
    (tmp_path / "p.json").write_text(json.dumps(plan))
    parsed = build_parser().parse_args(["--sharding", str(tmp_path / "p.json")]).sharding
    assert isinstance(parsed, ShardingPlan) and parsed["item"].kind == PlacementKind.ROW_WISE
    assert build_parser().parse_args(["--sharding", "row_wise"]).sharding == "row_wise"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--sharding", "diagonal"])
    assert "or a plan JSON file; 'diagonal' is neither" in capsys.readouterr().err


@pytest.mark.parametrize("bench", ["dlrm", "ablation", "ops", "quality", "memory_check"])
def test_rows_cap_none_means_the_real_cardinalities(bench):
    import argparse
    import importlib

    from sparselift.bench.dlrm import BenchConfig, add_arguments, dlrm_config

    module = importlib.import_module(f"sparselift.bench.{bench}")
    if bench == "dlrm":
        parser = argparse.ArgumentParser()
        add_arguments(parser)
    else:
        parser = module.build_parser()
    assert parser.parse_args(["--rows-cap", "none"]).rows_cap is None
    assert parser.parse_args(["--rows-cap", "NONE"]).rows_cap is None
    assert parser.parse_args(["--rows-cap", "1000000"]).rows_cap == 1_000_000
    for bad in ("0", "lots"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--rows-cap", bad])
    config = dlrm_config(BenchConfig(model="dlrm-kaggle", rows_cap=None))
    assert sum(config.num_rows) == 33_762_577  # Criteo Kaggle's 26 cardinalities, uncapped


# meta: the real-size path (each rank materializes its shards); a model built whole is bounded
# phase by phase in tests/runtime/test_real_size.py and test_memory_budget.py. Once, for time.
@pytest.mark.parametrize("build", ["meta"])
def test_memory_bench_reports_every_rank_against_the_bounds(tmp_path, build):
    cmd = CLI + [
        "bench",
        "memory",
        "--model",
        "dlrm-kaggle",
        "--rows-cap",
        "2000",
        "--build",
        build,
        "--batch-size",
        "32",
        "--steps",
        "1",
        "--calibration-budget",
        "3",
        "--json",
        str(tmp_path / "m.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "m.json").read_text())
    assert result["within_bounds"] and len(result["ranks"]) == 2
    for r in result["ranks"]:
        assert r["shards_mb"] > 0 and r["compile_peak_mb"] > 0
        assert (r["model_tables_mb"] > r["shards_mb"]) == (build == "cpu")  # a meta build holds no whole table
    assert "within the bounds on every rank: True" in proc.stdout


@pytest.mark.parametrize("command", ["explain", "export", "simulate"])
def test_sparselift_commands_take_real_sizes_too(command):
    # `--rows-cap none` (the real cardinalities) works wherever a rows cap is taken, not only in
    # the benchmarks.
    from sparselift.tools.cli import build_parser

    parser = build_parser()
    args = [command, "--model", "dlrm-kaggle", "--world-size", "2", "--rows-cap"]
    assert parser.parse_args([*args, "none"]).rows_cap is None
    assert parser.parse_args([*args, "5"]).rows_cap == 5
    with pytest.raises(SystemExit):
        parser.parse_args([*args, "0"])


# -- sparse optimizers: `bench kernels --optimizers`, `--sparse-optimizer` ---------------------------


def test_kernel_bench_times_each_optimizer_and_says_what_a_peer_lacks(tmp_path):
    cmd = CLI + ["bench", "kernels", "--quick", "--cases", "kaggle-onehot", "--optimizers", "adam,adagrad"]
    proc = subprocess.run(cmd + ["--json", str(tmp_path / "k.json")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (case,) = json.loads((tmp_path / "k.json").read_text())["cases"]
    # The chosen rows, in the table's order (SGD's fwd+bwd not chosen; the forward rows always).
    assert case["metrics"] == ["fwd", "fwd_nograd", "fwd_bwd_adagrad", "fwd_bwd_adam"]
    assert set(case["ms"]["sparselift-c"]) == set(case["metrics"])
    # FBGEMM's CPU TBE has Adagrad, not Adam: its Adam cell is n/a with what TBE said, never dropped.
    assert "fwd_bwd_adagrad" in case["ms"]["fbgemm-tbe"] and "fwd_bwd_adam" not in case["ms"]["fbgemm-tbe"]
    assert "not supported in CPU mode" in case["not_available"]["fbgemm-tbe"]["fwd_bwd_adam"]
    assert case["speedup_vs_fbgemm"]["fwd_bwd_adam"] is None and case["speedup_vs_fbgemm"]["fwd_bwd_adagrad"] > 0
    # torch runs SparseAdam in Adam's place, footnoted as another update.
    assert "SparseAdam" in case["stand_ins"]["torch-embbag"]["fwd_bwd_adam"]
    assert case["speedup_vs_torch"]["fwd_bwd_adam"] > 0
    # One step from the same weights: C Adagrad = FBGEMM's EXACT_ADAGRAD, C Adam = torch's Adam (touched rows).
    assert case["max_abs_diff_after_step_vs_fbgemm"]["adagrad"] < 1e-6
    assert case["max_abs_diff_after_step_vs_torch"]["adam"] < 1e-6
    adam_row = next(line for line in proc.stdout.splitlines() if "| fwd+bwd+Adam |" in line)
    assert "n/a [" in adam_row
    assert "FBGEMM 1.8.0's CPU TBE has no ADAM" in proc.stdout and "torch.optim.SparseAdam stands in" in proc.stdout
    bad = subprocess.run(cmd[:-1] + ["lamb"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown optimizer(s) ['lamb']" in bad.stderr


def test_fbgemm_cpu_still_lacks_the_adam_family():
    # `bench.dlrm.UNAVAILABLE` says TorchRec on CPU has no Adam because FBGEMM's CPU TBE refuses it.
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        OptimType,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    from sparselift.bench.dlrm import SPARSE_OPTIMIZERS
    from sparselift.tools.cli import SPARSE_OPTIMIZERS as CLI_NAMES

    spec = [(10, 4, EmbeddingLocation.HOST, ComputeDevice.CPU)]
    for opt in (OptimType.EXACT_SGD, OptimType.EXACT_ADAGRAD, OptimType.EXACT_ROWWISE_ADAGRAD):
        SplitTableBatchedEmbeddingBagsCodegen(spec, optimizer=opt)
    for opt in (OptimType.ADAM, OptimType.PARTIAL_ROWWISE_ADAM):
        with pytest.raises(AssertionError, match="not supported in CPU mode"):
            SplitTableBatchedEmbeddingBagsCodegen(spec, optimizer=opt)
    assert CLI_NAMES == SPARSE_OPTIMIZERS


def _sparse_optimizer_worker(rank: int, world: int, argv: list[str]) -> dict:
    import argparse

    import torch

    from sparselift.bench.baselines import synthetic_source
    from sparselift.bench.dlrm import _build_runner, add_arguments, config_from_args, dlrm_config

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(argv))
    config = dlrm_config(cfg)
    source = synthetic_source(config, seed=cfg.seed)
    locals_ = [next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world)))]
    runner = _build_runner("sparselift", cfg, config, rank, world, locals_)
    loss = runner.progress()
    return {"record": runner.sparse_optimizer, "groups": runner.compiled.sparse_optimizer.param_groups, "loss": loss}


def test_sparse_optimizer_option_reaches_sparselift_and_skips_the_peers_without_it():
    import argparse

    import sparselift
    from sparselift.bench.dlrm import BenchConfig, add_arguments, available_systems, config_from_args
    from sparselift.runtime.distributed import launch

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for given, kind in (
        ("adam", "adam"),
        ("rowwise-adagrad", "rowwise_adagrad"),
        ("Partial_RowWise-Adam", "partial_rowwise_adam"),
    ):
        assert parser.parse_args(["--sparse-optimizer", given]).sparse_optimizer == kind
    with pytest.raises(SystemExit):
        parser.parse_args(["--sparse-optimizer", "lamb"])
    argv = ["--sparse-optimizer", "adam", "--lr", "0.01", "--rows-cap", "200", "--batch-size", "16"]
    cfg = config_from_args(parser.parse_args(argv))
    assert (cfg.sparse_optimizer, cfg.lr) == ("adam", 0.01) and BenchConfig().sparse_optimizer == "sgd"
    ran, skipped = available_systems(cfg)
    assert ran.systems == ("sparselift",) and set(skipped) == {"baseline", "torchrec"}
    assert skipped["torchrec"].startswith("TorchRec on CPU has no Adam: FBGEMM's Adam is GPU-only")
    assert "SparseAdam is not the same update" in skipped["baseline"]
    assert available_systems(attrs.evolve(cfg, sparse_optimizer="adagrad"))[1] == {}
    (out,) = launch(_sparse_optimizer_worker, 1, argv, timeout_s=120)
    assert out["record"] == sparselift.optim.Adam(lr=0.01)
    (group,) = out["groups"]
    assert group["kind"] == "adam" and group["lr"] == 0.01 and group["betas"] == (0.9, 0.999)
    assert out["loss"] > 0


def test_a_compiled_system_takes_the_optimizers_its_model_carries():
    # compile() refuses sparse_optimizer= beside in-backward optimizers: the runner passes None then.
    import torch
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    import sparselift
    from sparselift.bench.systems import _tables_optimizer

    model = torch.nn.Module()
    model.bag = torch.nn.EmbeddingBag(10, 4)
    assert _tables_optimizer(model, None, 0.5) == (sparselift.optim.SGD(lr=0.5),) * 2
    apply_optimizer_in_backward(torch.optim.Adagrad, model.bag.parameters(), {"lr": 0.1, "eps": 1e-8})
    chosen = sparselift.optim.Adagrad(lr=0.1, eps=1e-8)
    assert _tables_optimizer(model, chosen, 0.1) == (chosen, None)
    assert _tables_optimizer(model, None, 0.1) == (chosen, None)
    with pytest.raises(ValueError, match="not the benchmark's Adam"):
        _tables_optimizer(model, sparselift.optim.Adam(lr=0.1), 0.1)


def test_quality_bench_with_adam_compares_against_the_reference_semantics(tmp_path):
    """The reference trains lazy Adam as written out (`parity.ReferenceSparseOptimizer`); a peer
    without Adam on CPU (TorchRec) is refused with its reason."""
    from sparselift.bench import quality, seq_quality

    out = tmp_path / "q.json"
    args = ["--model", "dlrm-kaggle", "--world-size", "2", "--steps", "6", "--batch-size", "32"]
    args += ["--rows-cap", "500", "--eval-batches", "2", "--sparse-optimizer", "adam", "--lr", "0.01"]
    assert quality.main([*args, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["config"]["sparse_optimizer"] == "adam"
    assert result["loss_rmse"] <= 1e-4, result["loss_rmse"]
    with pytest.raises(SystemExit) as e:
        seq_quality.main(["--system", "torchrec", "--sparse-optimizer", "adam"])
    assert e.value.code == 2
