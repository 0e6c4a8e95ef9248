"""`sparselift bench seq` (DIN): the data source, the systems against single-process DIN, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest
import torch
import torch.nn.functional as F

from sparselift.bench.seq_systems import DINBaselineRunner, DINDenseOnlyRunner, din_config, din_source
from sparselift.data.din_synthetic import KJT_FEATURES, DINBatch, DINSynthetic, DINSyntheticConfig
from sparselift.models.din import DIN, DINConfig, build_din
from sparselift.runtime.distributed import launch

CLI = [sys.executable, "-m", "sparselift.tools.cli"]
WORLD, B, SEED, LR = 2, 16, 3, 0.1
ATOL = 2e-6
CONFIG = din_config(rows_cap=500)


# -- data --------------------------------------------------------------------------------------------


def test_history_lengths_are_jagged_with_mean_about_30():
    batch = DINSynthetic(DINSyntheticConfig(item_rows=100_000, user_rows=1000)).samples(0, 8192)
    lengths = batch.history_lengths
    assert int(lengths.min()) == 1 and int(lengths.max()) == 50
    assert abs(float(lengths.float().mean()) - 30.0) < 1.0
    assert float(lengths.float().std()) > 8.0  # jagged, not nearly fixed
    mask = torch.arange(50)[None, :] < lengths[:, None]
    assert torch.equal(batch.history_items != 0, mask) and torch.equal(batch.history_cats != 0, mask)
    items = batch.history_items[mask]
    assert int(items.min()) >= 1 and int(items.max()) < 100_000
    assert int(batch.target_item.min()) >= 1 and int(batch.user_ids.max()) < 1000
    counts = torch.bincount(items)
    assert counts.max() > 50 * counts[counts > 0].float().median()  # Zipf: a few hot items
    assert 0.2 < float(batch.labels.mean()) < 0.8


def test_categories_are_a_fixed_hash_of_the_item():
    source = DINSynthetic(DINSyntheticConfig(item_rows=5000, cat_rows=100, user_rows=100))
    b = source.samples(0, 256)
    assert torch.equal(b.history_cats, torch.from_numpy(source.item_category(b.history_items)))
    assert torch.equal(b.target_cat, torch.from_numpy(source.item_category(b.target_item)))
    assert int(b.target_cat.min()) >= 1 and int(b.target_cat.max()) < 100


def test_stream_is_seeded_and_rank_sliceable():
    cfg = DINSyntheticConfig(item_rows=1000, user_rows=1000)
    a, again, other = DINSynthetic(cfg), DINSynthetic(cfg), DINSynthetic(attrs.evolve(cfg, seed=1))
    assert a.global_batch(2, 64).equal(again.global_batch(2, 64))
    assert not a.global_batch(2, 64).equal(other.global_batch(2, 64))
    parts = [a.local_batch(2, 32, r, 2) for r in range(2)]
    assert DINBatch.concat(parts).equal(a.global_batch(2, 64))
    assert a.global_batch(2, 64).rows(slice(32, 64)).equal(parts[1])


def test_padded_and_kjt_forms_carry_the_same_ids():
    b = din_source(CONFIG, seed=SEED).samples(0, 24)
    kjts = b.to_kjts()
    assert {t: kjts[t].keys() for t in kjts} == {t: list(f) for t, f in KJT_FEATURES.items()}
    item, cat, user = (kjts[t].to_dict() for t in ("item", "cat", "user"))
    for jt, padded in ((item["hist_item"], b.history_items), (cat["hist_cat"], b.history_cats)):
        assert torch.equal(jt.lengths(), b.history_lengths)
        assert torch.equal(jt.to_padded_dense(50, padding_value=0), padded)
    assert torch.equal(item["target_item"].values(), b.target_item)
    assert torch.equal(cat["target_cat"].values(), b.target_cat)
    assert torch.equal(user["user"].values(), b.user_ids)
    assert torch.equal(user["user"].offsets(), b.user_offsets)


# -- the model and its TorchRec twin ------------------------------------------------------------------


def test_din_shares_one_table_between_history_and_target():
    model, inputs = build_din(rows_cap=300, batch_size=8)
    assert isinstance(model.item, torch.nn.Embedding) and model.item.padding_idx == 0
    assert isinstance(model.user, torch.nn.EmbeddingBag) and model.user.mode == "sum"
    assert model.item.weight.shape == (300, 64) and model.cat.weight.shape == (300, 16)
    assert torch.count_nonzero(model.item.weight[0]) == 0 and torch.count_nonzero(model.cat.weight[0]) == 0
    out = model(*inputs)
    assert out.shape == (8,)
    out.sum().backward()
    assert model.item.weight.grad[0].abs().sum() == 0  # padding rows get no gradient
    meta = DIN(DINConfig(rows_cap=300), device="meta")
    shard = meta.init_table("item", torch.empty(100, 64), 150)
    assert torch.equal(shard, model.item.weight.detach()[150:250])


def test_din_and_torchrec_forward_agree_on_one_rank():
    from sparselift.bench.seq_torchrec import TorchRecDIN, din_collections, to_torchrec_din

    model = DIN(attrs.evolve(CONFIG, seed=SEED))
    tables = din_collections(CONFIG, torch.device("cpu"))
    with torch.no_grad():
        tables["ec_item"].embeddings["item"].weight.copy_(model.item.weight)
        tables["ec_cat"].embeddings["cat"].weight.copy_(model.cat.weight)
        tables["ebc"].embedding_bags["user"].weight.copy_(model.user.weight)
    net = TorchRecDIN(**tables, dense=model.dense, length=CONFIG.max_history)
    batch = din_source(CONFIG, seed=SEED).samples(0, 32)
    with torch.no_grad():
        torch.testing.assert_close(net.logits(to_torchrec_din(batch)), model(*batch.inputs()), atol=ATOL, rtol=0)


# -- the systems on 2 ranks, against single-process DIN on the global batches ------------------------


def _worker(rank: int, world: int) -> dict:
    from sparselift.bench.baselines import quiet_torchrec_setup
    from sparselift.bench.seq_torchrec import DINTorchRecRunner, din_ec_sparselift_runner

    torch.set_num_threads(1)
    src = din_source(CONFIG, seed=SEED)
    gbs = [src.global_batch(i, B * world) for i in range(3)]
    lbs = [src.local_batch(i, B, rank, world) for i in range(3)]
    out: dict = {}
    base = DINBaselineRunner(CONFIG, rank, world, LR, SEED)
    rows = base.local_rows(B * world)
    out["baseline_fwd0"] = base.forward(gbs[0], rows)
    base.enable_stage_timing()
    out["baseline_losses"] = [base.step(gbs[i], rows) for i in range(2)]
    out["baseline_fwd2"] = base.forward(gbs[2], rows)
    out["baseline_stages"] = base.stage_times
    with quiet_torchrec_setup():
        tr = DINTorchRecRunner(CONFIG, rank, world, LR, SEED, iter(lbs[:2]))
    out["torchrec_fwd0"] = tr.forward(lbs[0])
    tr.enable_stage_timing()
    out["torchrec_losses"] = [tr.progress() for _ in range(2)]
    out["torchrec_fwd2"] = tr.forward(lbs[2])
    out["torchrec_pipeline"] = tr.pipeline
    # SparseLift compiling DIN as written with TorchRec's collections (KJT inputs).
    ec = din_ec_sparselift_runner(CONFIG, rank, world, LR, SEED, lbs[0], batches=iter(lbs[:2]), passes="")
    out["sparselift_ec_fwd0"] = ec.forward(lbs[0])
    out["sparselift_ec_losses"] = [ec.progress() for _ in range(2)]
    out["sparselift_ec_fwd2"] = ec.forward(lbs[2])
    out["sparselift_ec_gathers_rows"] = "sparse.gather_rows" in ec.compiled.plan.ir_text
    dense = DINDenseOnlyRunner(CONFIG, rank, world, LR, SEED)
    out["dense_losses"] = [dense.step(lbs[0]) for _ in range(2)]
    return out


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    return launch(_worker, WORLD, timeout_s=150)


@pytest.fixture(scope="module")
def reference() -> dict:
    model = DIN(attrs.evolve(CONFIG, seed=SEED))
    src = din_source(CONFIG, seed=SEED)
    gbs = [src.global_batch(i, B * WORLD) for i in range(3)]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with torch.no_grad():
        fwd0 = model(*gbs[0].inputs())
    losses = []
    for gb in gbs[:2]:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(*gb.inputs()), gb.labels)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        fwd2 = model(*gbs[2].inputs())
    return {"fwd0": fwd0, "fwd2": fwd2, "losses": losses}


@pytest.mark.parametrize("system", ["baseline", "torchrec", "sparselift_ec"])
def test_system_trains_as_single_process_din(ranks, reference, system):
    for rank, r in enumerate(ranks):
        rows = slice(rank * B, (rank + 1) * B)
        torch.testing.assert_close(r[f"{system}_fwd0"].reshape(-1), reference["fwd0"][rows], atol=ATOL, rtol=0)
        torch.testing.assert_close(r[f"{system}_fwd2"].reshape(-1), reference["fwd2"][rows], atol=ATOL, rtol=0)
    mean = [sum(r[f"{system}_losses"][i] for r in ranks) / WORLD for i in range(2)]
    assert mean == pytest.approx(reference["losses"], abs=1e-6)


def test_sparselift_on_the_torchrec_model_sends_history_rows_one_per_id(ranks):
    assert all(r["sparselift_ec_gathers_rows"] for r in ranks)


def test_torchrec_runs_train_pipeline_sparse_dist_and_stages_are_timed(ranks):
    assert ranks[0]["torchrec_pipeline"] == "sparse_dist"
    stages = ranks[0]["baseline_stages"]
    assert len(stages) == 2 and all(s.sparse_fwd > 0 and s.sparse_bwd > 0 and s.other_bwd > 0 for s in stages)
    assert all(0.5 < loss < 1.0 for r in ranks for loss in r["dense_losses"])


# -- the command ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seq_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("seq")
    args = ["--world-size", "2", "--rows-cap", "1000", "--batch-size", "32", "--steps", "2", "--rounds", "1"]
    cmd = CLI + [
        "bench",
        "seq",
        "--systems",
        "baseline,torchrec",
        *args,
        "--warmup",
        "1",
        "--json",
        str(out / "r.json"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout, json.loads((out / "r.json").read_text())


def test_bench_seq_json_has_bench_dlrm_keys(seq_run):
    stdout, result = seq_run
    for label in ("PyTorch-Baseline", "TorchRec", "dense-only", "Sequence-model benchmark (DIN)"):
        assert label in stdout
    assert set(result["systems"]) == {"baseline", "torchrec"}
    for s in result["systems"].values():
        for key in (
            "step_ms_median",
            "step_ms_p25",
            "step_ms_p75",
            "samples_per_s",
            "exposed_sparse_ms",
            "peak_rss_mb",
        ):
            assert key in s, key
        assert set(s["breakdown"]) == {"sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other"}
        assert s["exposed_sparse_ms"] == pytest.approx(s["step_ms_median"] - result["dense_only_step_ms"])
    assert result["ratios"]["ceiling_vs_torchrec"] > 0
    assert result["config"]["model"] == "din" and result["config"]["batch_size"] == 32
    assert result["torchrec_pipeline"] == "sparse_dist" and "torch" in result["machine"]


def test_summary_has_sparselift_vs_torchrec():
    from sparselift.bench.dlrm import COLUMNS
    from sparselift.bench.seq import LABELS, default_config, format_seq_table, summarize

    def record(ms: float) -> dict:
        return {
            "step_ms": [ms, ms],
            "breakdown": [dict.fromkeys(COLUMNS, ms / 5)] * 2,
            "setup_s": 1.0,
            "warmup_s": 1.0,
            "memory": {"peak_rss_mb": 10.0, "resident_mb": 5.0},
        }

    steps = {"baseline": 30.0, "torchrec": 20.0, "sparselift": 10.0, "dense_only": 5.0}
    rank = {k: {n: record(ms)[k] for n, ms in steps.items()} for k in record(0)}
    result = summarize(default_config(), [rank, rank], LABELS)
    assert result["ratios"] == pytest.approx(
        {"sparselift_vs_baseline": 3.0, "sparselift_vs_torchrec": 2.0, "ceiling_vs_torchrec": 4.0}
    )
    assert "sparselift_vs_torchrec" in format_seq_table(result)


def test_seq_quality_sparselift_matches_single_process(tmp_path):
    cmd = CLI + ["bench", "seq-quality", "--steps", "3", "--batch-size", "16", "--rows-cap", "500"]
    proc = subprocess.run(
        cmd + ["--eval-batches", "1", "--json", str(tmp_path / "q.json")], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "q.json").read_text())
    assert set(result["losses"]) == {"reference", "sparselift"}
    assert result["loss_rmse"] <= 1e-4
