"""The sparse optimizer the user picks, trained as asked: every optimizer against single-process
training at world sizes 1-3 (placements, optimizations, uneven batches, unpooled tables),
chosen the TorchRec way, scheduled at run time, refused when unsupported, and checkpointed."""

from __future__ import annotations

import math

import pytest
import torch
from parity_models import ALL_FOUR  # tests/runtime is on sys.path
from torch import nn

import sparselift
from sparselift.optim import (
    SGD,
    Adagrad,
    Adam,
    AdamW,
    PartialRowWiseAdam,
    RowWiseAdagrad,
    UnsupportedOptimizer,
    as_config,
    choose,
    from_class,
)
from sparselift.runtime.distributed import launch
from sparselift.runtime.parity import check_parity

NEW = {
    "adagrad": Adagrad(lr=0.1, eps=1e-8),
    "adam": Adam(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01),
    "adamw": AdamW(lr=0.05, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1),
    "partial_rowwise_adam": PartialRowWiseAdam(lr=0.05, betas=(0.85, 0.9), eps=1e-6, weight_decay=0.01),
}
UNEVEN = [[8, 3], [5, 8], [1, 6]]  # each rank's local batch per step


@pytest.mark.parametrize("kind", sorted(NEW))
def test_one_rank_matches_single_process(kind):
    check_parity("two-tower", 1, sharding="auto", optimizer=NEW[kind], steps=3, batch=8, rows_cap=200)


CASES = [
    # optimizer, model, world, sharding, passes, sizes, kernels: what the case covers
    pytest.param("adam", "two-tower", 2, "auto", ALL_FOUR, UNEVEN, "generated", id="ws2-adam-auto-all-four-uneven"),
    pytest.param("adagrad", "two-tower", 2, "row_wise", "", None, "generated", id="ws2-adagrad-row-wise"),
    pytest.param("adamw", "dlrm-kaggle", 2, "auto", "", None, "generated", id="ws2-adamw-kaggle-replicated"),
    pytest.param(
        "partial_rowwise_adam",
        "parity_models:sequence_model",
        2,
        "auto",
        ALL_FOUR,
        None,
        "generated",
        id="ws2-partial-adam-unpooled",
    ),
    pytest.param("adam", "two-tower", 3, "row_wise", "", None, "reference", id="ws3-adam-row-wise-reference"),
    pytest.param(
        "partial_rowwise_adam", "two-tower", 3, "table_wise", ALL_FOUR, None, "generated", id="ws3-partial-adam"
    ),
    pytest.param("adagrad", "two-tower", 3, "data_parallel", "", None, "generated", id="ws3-adagrad-replicated"),
    pytest.param("adamw", "parity_models:sequence_model", 3, "auto", "", None, "generated", id="ws3-adamw-unpooled"),
]


@pytest.mark.parametrize("kind, model, world, sharding, passes, sizes, kernels", CASES)
def test_training_matches_single_process(kind, model, world, sharding, passes, sizes, kernels):
    check_parity(
        model,
        world,
        sharding=sharding,
        optimizer=NEW[kind],
        steps=3,
        batch=8,
        rows_cap=200,
        passes=passes,
        sizes=sizes,
        kernels=kernels,
    )


def _two_tower_tables() -> list[str]:
    """The two-tower model's table parameters, as the compiler finds them."""
    from sparselift.codegen.table_facts import describe_tables
    from sparselift.models import build

    model, example = build("two-tower", rows_cap=200, batch_size=8, seed=0)
    return [f.param for f in describe_tables(sparselift.export(model, example, world_size=1).module)]


def test_apply_optimizer_in_backward_per_table_matches_single_process():
    """TorchRec's way: each table its own optimizer class and learning rate, honoured per table."""
    import torchrec.optim

    tables = _two_tower_tables()
    choices = [
        (torch.optim.Adam, {"lr": 0.02, "betas": (0.9, 0.99), "eps": 1e-6}),
        (torchrec.optim.RowWiseAdagrad, {"lr": 0.1, "eps": 1e-8}),
        (torch.optim.Adagrad, {"lr": 0.05, "eps": 1e-8}),
        (torch.optim.AdamW, {"lr": 0.03, "eps": 1e-6, "weight_decay": 0.05}),
        (torch.optim.SGD, {"lr": 0.07}),
    ]
    optimizer = {name: choices[k % len(choices)] for k, name in enumerate(tables)}
    check_parity("two-tower", 2, sharding="auto", optimizer=optimizer, steps=3, batch=8, rows_cap=200)


@pytest.mark.parametrize(
    "world, optimizer",
    [
        pytest.param(2, RowWiseAdagrad(lr=0.1, eps=1e-8), id="ws2-rowwise-adagrad"),
        pytest.param(1, SGD(lr=0.1), id="ws1-sgd"),
    ],
)
def test_step_lr_schedule_matches_single_process(world, optimizer):
    """StepLR on `compiled.sparse_optimizer`: the tables train at 0.1, 0.05, 0.025, 0.0125."""
    check_parity("two-tower", world, sharding="auto", optimizer=optimizer, steps=4, batch=8, lr_gamma=0.5)


# ---- choosing --------------------------------------------------------------------------------


def test_torch_classes_map_to_records_with_their_own_defaults():
    import torchrec.optim

    assert from_class(torch.optim.SGD, {}) == SGD(lr=1e-3)  # torch's default, not SparseLift's
    assert from_class(torch.optim.Adam, {"lr": 0.5}) == Adam(lr=0.5)
    assert from_class(torch.optim.Adam, {"lr": 0.5, "decoupled_weight_decay": True, "weight_decay": 0.1}) == AdamW(
        lr=0.5, weight_decay=0.1
    )
    assert from_class(torch.optim.AdamW, {}) == AdamW()
    assert from_class(torch.optim.Adagrad, {"lr": 0.2}) == Adagrad(lr=0.2, eps=1e-10)
    assert from_class(torchrec.optim.RowWiseAdagrad, {"lr": 0.2}) == RowWiseAdagrad(lr=0.2, eps=1e-10)
    assert from_class(torchrec.optim.PartialRowWiseAdam, {"lr": 0.2}) == PartialRowWiseAdam(lr=0.2, eps=1e-8)
    assert as_config((torch.optim.Adam, {"lr": 1e-3, "foreach": None})) == Adam(lr=1e-3)


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (torch.optim.RMSprop, {"lr": 0.1}, r"torch\.optim\.rmsprop\.RMSprop is not supported; supported: torch"),
        (torch.optim.Adam, {"amsgrad": True}, r"with amsgrad=True is not supported"),
        (torch.optim.Adam, {"maximize": True}, r"with maximize=True is not supported"),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, r"with momentum=0\.9 is not supported"),
        (torch.optim.Adagrad, {"lr_decay": 0.1}, r"with lr_decay=0\.1 is not supported"),
        (torch.optim.Adagrad, {"weight_decay": 0.1}, r"with weight_decay=0\.1 is not supported"),
        (torch.optim.Adam, {"lr": -1.0}, r"lr must be a positive finite number"),
        (torch.optim.Adam, {"betas": (0.9, 1.5)}, r"betas must be two numbers in \[0, 1\)"),
    ],
)
def test_unsupported_optimizers_are_refused_naming_the_table(cls, kwargs, message):
    with pytest.raises(UnsupportedOptimizer, match=message) as info:
        from_class(cls, kwargs, where="table 'emb.weight'")
    assert "table 'emb.weight'" in str(info.value)


def test_both_ways_at_once_or_some_tables_without_one_are_errors():
    tables = [("t0", "a.weight"), ("t1", "b.weight")]
    both = {"a.weight": (torch.optim.Adam, {}), "b.weight": (torch.optim.Adam, {})}
    with pytest.raises(UnsupportedOptimizer, match="sparse_optimizer= was given too"):
        choose(SGD(), both, tables)
    with pytest.raises(UnsupportedOptimizer, match="but not to b.weight"):
        choose(None, {"a.weight": (torch.optim.Adam, {})}, tables)
    chosen = choose(None, {**both, "b.weight": (torch.optim.SGD, {"lr": 0.5})}, tables)
    assert chosen.groups == (Adam(), SGD(lr=0.5)) and chosen.table_groups == {"t0": 0, "t1": 1}
    assert choose(None, {}, tables).groups == (SGD(),)  # nothing chosen: the documented default
    with pytest.raises(UnsupportedOptimizer, match="is not an optimizer"):
        choose("adam", {}, tables)


class _Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(50, 4, mode="sum")
        self.out = nn.Linear(4, 1)

    def forward(self, ids, offsets):
        return self.out(self.emb(ids, offsets))


def _bags_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50, (12,), generator=g), torch.arange(0, 12, 3)


def _compile_refused(rank: int, world: int, cache: str) -> str:
    from torch.distributed.optim import _apply_optimizer_in_backward

    torch.manual_seed(0)
    model = _Bags()
    _apply_optimizer_in_backward(torch.optim.RMSprop, [model.emb.weight], {"lr": 0.1})
    before = model.emb.weight.detach().clone()
    try:
        sparselift.compile(model, _bags_inputs(), options=sparselift.CompileOptions(cache_dir=cache, plan="none"))
    except UnsupportedOptimizer as e:
        assert torch.equal(model.emb.weight, before)
        return str(e)
    return "compiled"


def test_an_unsupported_in_backward_optimizer_is_refused_on_every_rank(tmp_path):
    messages = launch(_compile_refused, 2, str(tmp_path), timeout_s=60)
    assert len(set(messages)) == 1, messages
    assert "table 'emb.weight'" in messages[0] and "RMSprop is not supported" in messages[0], messages[0]


# ---- run-time hyperparameters ----------------------------------------------------------------


def _compiled(optimizer, tmp_path, seed: int = 0, model=None):
    torch.manual_seed(seed)
    model = model or _Bags()
    options = sparselift.CompileOptions(cache_dir=str(tmp_path), plan="none")
    return sparselift.compile(model, _bags_inputs(), sparse_optimizer=optimizer, options=options)


def _steps(compiled, seeds) -> None:
    for s in seeds:
        compiled(*_bags_inputs(s)).square().mean().backward()


def test_learning_rate_changes_need_no_recompile_and_no_plan_of_their_own(tmp_path):
    a = _compiled(Adam(lr=0.1), tmp_path)
    b = _compiled(Adam(lr=0.001, eps=1e-3), tmp_path)
    assert a.plan.hash == b.plan.hash  # the plan (and its cache entry) does not hold a hyperparameter
    assert "lr=" not in a.plan.source and "lr =" not in a.plan.ir_text
    schedule = torch.optim.lr_scheduler.SequentialLR(
        a.sparse_optimizer,
        [
            torch.optim.lr_scheduler.LinearLR(a.sparse_optimizer, start_factor=0.1, total_iters=2),
            torch.optim.lr_scheduler.LambdaLR(a.sparse_optimizer, lambda step: 0.5**step),
        ],
        milestones=[2],
    )
    seen = []
    for s in range(4):
        seen.append(a.sparse_optimizer.param_groups[0]["lr"])
        _steps(a, [s])
        schedule.step()
    assert seen == pytest.approx([0.01, 0.055, 0.1, 0.05])
    assert int(a.sparse_optimizer.steps[0]) == 4


@pytest.mark.parametrize("bad", [float("nan"), -0.1, float("inf")])
def test_a_bad_learning_rate_fails_the_next_step_naming_the_group_and_changes_no_table(tmp_path, bad):
    compiled = _compiled(Adam(lr=0.1), tmp_path)
    _steps(compiled, [0])
    before = compiled.state_dict()
    compiled.sparse_optimizer.param_groups[0]["lr"] = bad
    with pytest.raises(ValueError, match=r"param_groups\[0\] \(adam on tables emb\): lr is"):
        _steps(compiled, [1])
    after = compiled.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("emb"))
    compiled.sparse_optimizer.param_groups[0]["lr"] = 0.1  # fixed: training goes on
    _steps(compiled, [1])
    assert not math.isnan(float(compiled.state_dict()["emb.weight"].sum()))


# ---- checkpoints -----------------------------------------------------------------------------

OPTIMIZERS = {"sgd": SGD(lr=0.1), "rowwise_adagrad": RowWiseAdagrad(lr=0.1), **NEW}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_a_checkpoint_resumes_exactly(tmp_path, kind):
    """Two steps, a checkpoint, a fresh compiled model loading it, one more step: the same bits
    as three steps in one go (tables, optimizer state and step counts, hyperparameters)."""
    straight = _compiled(OPTIMIZERS[kind], tmp_path)
    _steps(straight, [0, 1, 2])
    first = _compiled(OPTIMIZERS[kind], tmp_path)
    _steps(first, [0, 1])
    state, hyper = first.state_dict(), first.sparse_optimizer.state_dict()
    resumed = _compiled(OPTIMIZERS[kind], tmp_path, seed=1)  # other initial weights, all overwritten
    resumed.load_state_dict(state)
    resumed.sparse_optimizer.load_state_dict(hyper)
    _steps(resumed, [2])
    want, got = straight.state_dict(), resumed.state_dict()
    assert sorted(want) == sorted(got)
    for key in want:
        assert torch.equal(want[key], got[key]), key
    states = {k for k in want if k.startswith("emb.weight.")}
    rule = OPTIMIZERS[kind].rule
    assert states == {f"emb.weight.{s.name}" for s in rule.states} | (
        {"emb.weight.step"} if rule.counts_steps else set()
    )


def test_another_optimizers_state_is_refused_naming_the_kinds(tmp_path):
    adam = _compiled(Adam(lr=0.1), tmp_path)
    _steps(adam, [0])
    state = adam.state_dict()
    sgd = _compiled(SGD(lr=0.1), tmp_path)
    with pytest.raises(
        KeyError, match=r"unexpected keys .*emb\.weight\.exp_avg.*train with sgd, whose optimizer state"
    ):
        sgd.load_state_dict(state)
    other = _compiled(Adam(lr=0.1), tmp_path)
    with pytest.raises(KeyError, match=r"missing keys \['emb\.weight\.exp_avg_sq'\].*'<table>\.exp_avg_sq'"):
        other.load_state_dict({k: v for k, v in state.items() if k != "emb.weight.exp_avg_sq"})
    with pytest.raises(ValueError, match=r"group 0 is adam on tables \['emb'\]; the checkpoint's is sgd"):
        other.sparse_optimizer.load_state_dict(sgd.sparse_optimizer.state_dict())


def _dcp_resume(rank: int, world: int, path: str, cache: str) -> dict:
    import torch.distributed.checkpoint as dcp

    from sparselift.models import build

    def compiled(seed):
        torch.manual_seed(seed)
        model, example = build("two-tower", rows_cap=200, batch_size=8, seed=0)
        options = sparselift.CompileOptions(cache_dir=cache, plan="none", grad_reduction="mean")
        return sparselift.compile(model, example, sharding="row_wise", sparse_optimizer=NEW["adam"], options=options)

    def steps(c, seeds):
        for s in seeds:
            _, batch = build("two-tower", rows_cap=200, batch_size=8, seed=100 + 7 * s + rank)
            out = c(*batch)
            (out if isinstance(out, torch.Tensor) else out[0]).square().mean().backward()

    straight = compiled(0)
    steps(straight, [0, 1, 2])
    first = compiled(0)
    steps(first, [0, 1])
    dcp.save(first.sharded_state_dict(), checkpoint_id=path)
    resumed = compiled(0)
    dcp.load(resumed.sharded_state_dict(), checkpoint_id=path)
    steps(resumed, [2])
    want, got = straight.state_dict(), resumed.state_dict()
    return {k: float((want[k] - got[k]).abs().max()) for k in want if want[k].is_floating_point()}


def test_a_distributed_checkpoint_resumes_adam_exactly(tmp_path):
    for diffs in launch(_dcp_resume, 2, str(tmp_path / "ckpt"), str(tmp_path / "cache"), timeout_s=120):
        assert diffs and max(diffs.values()) == 0.0, diffs
