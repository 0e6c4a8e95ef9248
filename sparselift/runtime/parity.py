"""Training parity: a compiled model on W gloo ranks against single-process training.

The reference trains an unmodified copy of the model in one process on the same data: at each
step it runs every rank's local batch, averages the per-rank losses (each a mean over its own
batch), and applies plain SGD to the dense parameters and the sparse optimizer to the tables
(`reference_table_step`: each optimizer's formulas written out here, independently of
`sparselift.optim_rules`, on the rows the step touched) with the exact gradients of that
average. This is DDP's convention, and also when local batches differ in size (`sizes`:
per step, each rank's batch): the gradient is that of `sum_r loss_r / W`, which is the mean loss
on the global batch only when the local batches have equal sizes. The compiled side runs `sparselift.compile` on
each rank with `grad_reduction="mean"`. Both report the forward outputs of every step, the
tables after the last step and the dense gradients of the last step.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from sparselift.models import build
from sparselift.optim_rules import OptimizerKind
from sparselift.runtime.reference import sqrt_rn


def _loss(out) -> torch.Tensor:
    out = out if isinstance(out, torch.Tensor) else out[0]
    target = torch.linspace(-1.0, 1.0, out.numel(), device=out.device).reshape(out.shape)
    return ((out - target) ** 2).mean()


def build_model(model_name: str, *, rows_cap, batch_size: int, seed: int):
    """A built-in model by name, or `package.module:function(rows_cap, batch_size, seed)`."""
    if ":" in model_name:
        module, func = model_name.split(":", 1)
        return getattr(importlib.import_module(module), func)(rows_cap=rows_cap, batch_size=batch_size, seed=seed)
    return build(model_name, rows_cap=rows_cap, batch_size=batch_size, seed=seed)


def local_batches(model_name: str, world: int, steps: int, batch: int, rows_cap: int, seed: int, sizes=None):
    """batches[step][rank]: each rank's inputs, drawn from the model's example-input generator,
    of `sizes[step][rank]` samples (default: `batch` everywhere)."""
    return [
        [
            build_model(
                model_name,
                rows_cap=rows_cap,
                batch_size=sizes[step][rank] if sizes else batch,
                seed=1000 + 17 * step + rank,
            )[1]
            for rank in range(world)
        ]
        for step in range(steps)
    ]


def reference_run(
    model_name: str,
    world: int,
    steps: int,
    batch: int,
    rows_cap: int,
    optimizer,
    seed: int = 0,
    table_names: list[str] | None = None,
    sizes=None,
    lr_gamma: float | None = None,
) -> dict[str, Any]:
    model, _ = build_model(model_name, rows_cap=rows_cap, batch_size=batch, seed=seed)
    model = copy.deepcopy(model)
    lr = as_optimizer(optimizer).lr  # the dense parameters' (SGD)
    batches = local_batches(model_name, world, steps, batch, rows_cap, seed, sizes)
    tables = set(table_names or [])
    states: dict[str, dict[str, torch.Tensor]] = {}
    outputs = []
    grads: dict[str, torch.Tensor] = {}
    for step, step_batches in enumerate(batches):
        decay = lr_gamma**step if lr_gamma is not None else 1.0
        model.zero_grad()
        loss: torch.Tensor | float = 0.0
        step_out = []
        for inputs in step_batches:
            out = model(*inputs)
            step_out.append(out.detach().clone())
            loss = loss + _loss(out) / world
        cast(torch.Tensor, loss).backward()  # a tensor after a step's first batch
        outputs.append(step_out)
        grads = {}
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.grad is None:
                    continue
                if name in tables:
                    config = as_optimizer(optimizer, name if isinstance(optimizer, dict) else None)
                    state = states.setdefault(name, {})
                    reference_table_step(config, config.lr * decay, p, p.grad, state, step + 1)
                else:
                    grads[name] = p.grad.clone()
                    p -= lr * p.grad
    return {
        "outputs": outputs,
        "tables": {n: p.detach().clone() for n, p in model.named_parameters() if n in tables},
        "dense": {n: p.detach().clone() for n, p in model.named_parameters() if n not in tables},
        "grads": grads,
    }


def as_optimizer(optimizer, table: str | None = None):
    """A `sparselift.optim` record, from one, from `(kind, lr, eps)`, or from a mapping of table
    parameter names to `(class, kwargs)` (the optimizers `apply_optimizer_in_backward` gives
    each table; `table` picks one, or the first)."""
    from sparselift.optim import SGD, RowWiseAdagrad, from_class

    if isinstance(optimizer, dict):
        cls, kwargs = optimizer[table] if table is not None else next(iter(optimizer.values()))
        return from_class(cls, kwargs)
    if not isinstance(optimizer, tuple):
        return optimizer
    kind, lr, eps = optimizer
    return SGD(lr=lr) if kind == OptimizerKind.SGD else RowWiseAdagrad(lr=lr, eps=eps)


def reference_table_step(config, lr: float, p: torch.Tensor, g: torch.Tensor, state: dict, step: int) -> None:
    """One single-process step of table `p` with the sparse optimizer `config` (at learning rate
    `lr`) on its dense gradient `g`, updating only the rows it touched (a non-zero gradient
    row), at step count `step`; `state` holds the optimizer's tensors for `p`."""
    if config.kind == OptimizerKind.SGD:
        p -= lr * g
        return
    touched = torch.nonzero((g != 0).any(dim=1)).flatten()
    reference_rows_step(config, lr, p, touched, g[touched], state, step)


def reference_rows_step(
    config, lr: float, p: torch.Tensor, rows: torch.Tensor, gt: torch.Tensor, state: dict, step: int
) -> None:
    """One step of table `p` with `config` on its touched `rows` (distinct), whose summed
    gradients are `gt`: each optimizer's formulas written out, independently of
    `sparselift.optim_rules` (the issue's semantics: lazy, bias-corrected by the step count)."""
    kind = OptimizerKind(config.kind)
    w = p[rows]
    hyper = config.hyperparameters()
    eps, b1, b2, wd = hyper["eps"], hyper["beta1"], hyper["beta2"], hyper["weight_decay"]
    if kind == OptimizerKind.SGD:
        p[rows] = w - lr * gt
    elif kind == OptimizerKind.ADAGRAD:
        acc = state.setdefault("sum", torch.zeros_like(p))
        acc[rows] += gt * gt
        p[rows] = w - lr * (gt / (sqrt_rn(acc[rows]) + eps))
    elif kind == OptimizerKind.ROWWISE_ADAGRAD:
        acc = state.setdefault("momentum", torch.zeros(p.shape[0], device=p.device))
        acc[rows] += (gt**2).mean(dim=1)
        p[rows] = w - lr * (gt / (sqrt_rn(acc[rows]) + eps)[:, None])
    elif kind in (OptimizerKind.ADAM, OptimizerKind.ADAMW):
        if kind == OptimizerKind.ADAMW:
            w = w - lr * wd * w
        else:
            gt = gt + wd * w
        m, v = state.setdefault("exp_avg", torch.zeros_like(p)), state.setdefault("exp_avg_sq", torch.zeros_like(p))
        m[rows] = b1 * m[rows] + (1 - b1) * gt
        v[rows] = b2 * v[rows] + (1 - b2) * (gt * gt)
        m_hat, v_hat = m[rows] / (1 - b1**step), v[rows] / (1 - b2**step)
        p[rows] = w - lr * (m_hat / (sqrt_rn(v_hat) + eps))
    elif kind == OptimizerKind.PARTIAL_ROWWISE_ADAM:
        m = state.setdefault("exp_avg", torch.zeros_like(p))
        v = state.setdefault("exp_avg_sq", torch.zeros(p.shape[0], device=p.device))
        m[rows] = b1 * m[rows] + (1 - b1) * gt
        v[rows] = b2 * v[rows] + (1 - b2) * (gt**2).mean(dim=1)
        m_hat, v_hat = m[rows] / (1 - b1**step), v[rows] / (1 - b2**step)
        p[rows] = w - lr * (m_hat / (sqrt_rn(v_hat) + eps)[:, None] + wd * w)
    else:
        raise ValueError(f"no reference for optimizer '{kind}'")


class ReferenceSparseOptimizer(torch.optim.Optimizer):
    """The reference semantics of a `sparselift.optim` record as a torch optimizer of sparse
    gradients (`nn.EmbeddingBag(sparse=True)`), for single-process baselines of optimizers torch
    has no sparse form of (lazy Adam, row-wise Adagrad, ...): `reference_rows_step` on each
    parameter's coalesced gradient, one step count for all."""

    def __init__(self, params, record):
        super().__init__(params, {"lr": record.lr})
        self.record, self.count = record, 0

    @torch.no_grad()
    def step(self, closure=None):
        self.count += 1
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad if p.grad.is_sparse else p.grad.to_sparse()
                # An id's occurrences summed in the order the batch holds them (not coalesce()'s)
                rows, inverse = torch.unique(g._indices()[0], return_inverse=True)
                summed = torch.zeros(rows.numel(), p.shape[1], dtype=g.dtype).index_add_(0, inverse, g._values())
                reference_rows_step(self.record, group["lr"], p, rows, summed, self.state[p], self.count)
        return None


def _to(device: str, x):
    """`x` (a tensor, or tuples and lists of them) on `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(device, v) for v in x)
    if isinstance(x, dict):
        return {k: _to(device, v) for k, v in x.items()}
    return x


def compiled_worker(
    rank: int,
    world: int,
    model_name: str,
    steps: int,
    batch: int,
    rows_cap: int,
    sharding: str,
    optimizer,
    seed: int = 0,
    kernels: str = "reference",
    pipeline: bool = False,
    passes: str = "",
    device: str = "cpu",
    sizes=None,
    rows: str = "jagged",
    replicated_grads: str = "with-dense",
    transport: str = "auto",
    lr_gamma: float | None = None,
) -> dict[str, Any]:
    """Train the compiled model on this rank (on `device`); results come back on the CPU.
    `lr_gamma`: the tables' learning rate decays by this factor after every step (a `StepLR` on
    `compiled.sparse_optimizer`)."""
    import sparselift

    torch.manual_seed(seed)
    model, example = build_model(model_name, rows_cap=rows_cap, batch_size=batch, seed=seed)
    model, example = model.to(device), _to(device, example)
    lr = as_optimizer(optimizer).lr  # the dense parameters' (SGD)
    compiled = sparselift.compile(
        model,
        example,
        sharding=sharding,
        sparse_optimizer=_sparse_optimizer(model, optimizer),
        options=sparselift.CompileOptions(
            grad_reduction="mean",
            kernels=kernels,
            passes=passes,
            plan="none",
            rows=rows,
            replicated_grads=replicated_grads,
            transport=transport,
        ),
    )
    dense_opt = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=lr)
    schedule = (
        torch.optim.lr_scheduler.StepLR(compiled.sparse_optimizer, step_size=1, gamma=lr_gamma)
        if lr_gamma is not None
        else None
    )
    batches = _to(device, local_batches(model_name, world, steps, batch, rows_cap, seed, sizes))
    outputs, grads = [], {}
    if pipeline:
        from sparselift.runtime.pipeline import TrainPipeline

        def loss_fn(out, _target):
            outputs.append(out.detach().clone())
            return _loss(out)

        pipe = TrainPipeline(compiled, dense_opt, ((b[rank], None) for b in batches), loss_fn)
        for _ in batches:
            pipe.progress()
        grads = {n: p.grad.clone() for n, p in compiled.dense_named_parameters() if p.grad is not None}
    for step_batches in [] if pipeline else batches:
        dense_opt.zero_grad()
        out = compiled(*step_batches[rank])
        outputs.append(out.detach().clone())
        _loss(out).backward()
        grads = {n: p.grad.clone() for n, p in compiled.dense_named_parameters() if p.grad is not None}
        dense_opt.step()
        if schedule is not None:
            schedule.step()
    state = compiled.state_dict()
    tables = {info.param: state[info.param] for info in compiled.table_facts}
    ir_text = compiled.plan.ir_text
    ops = sorted(set(re.findall(r"\b(?:sparse|coll|sched)\.[a-z_]+", ir_text)) | _op_forms(ir_text))
    # Whether replicated tables' gradients ride in the dense all-reduce: the lowering under test ran.
    riding = "with_dense_grads" in compiled.plan.ir_text
    return _to(
        "cpu",
        {
            "outputs": outputs,
            "tables": tables,
            "grads": grads,
            "table_names": list(tables),
            "ops": ops,
            "riding": riding,
            "transport": "shm" if compiled.runner.shm is not None else "gloo",
        },
    )


def _sparse_optimizer(model: torch.nn.Module, optimizer):
    """`compile`'s `sparse_optimizer=` for the parity run's `optimizer`; a mapping of table
    parameters to `(class, kwargs)` is applied to the model's tables instead, the TorchRec way
    (`apply_optimizer_in_backward`), and None returned."""
    if not isinstance(optimizer, dict):
        return as_optimizer(optimizer)
    from torch.distributed.optim import _apply_optimizer_in_backward

    params = dict(model.named_parameters())
    for name, (cls, kwargs) in optimizer.items():
        _apply_optimizer_in_backward(cls, [params[name]], kwargs)
    return None


def _op_forms(ir_text: str) -> set[str]:
    """Named forms of ops that `expect_ops` can ask for besides op names:
    `sparse.fused_lookup_grad(per-slot)`, a table gradient that reads its slots' gradients one
    by one (more gradients than tables)."""
    forms = set()
    for line in ir_text.splitlines():
        m = re.search(r"sparse\.fused_lookup_grad .*?grads\(([^:]*):.*?tables = \[(.*?)\] placements", line)
        if m and m.group(1).count("%") > m.group(2).count("#sparse.table<"):
            forms.add("sparse.fused_lookup_grad(per-slot)")
    return forms


def _prefixed(what: str) -> Callable[[str], str]:
    """`assert_close`'s `msg=`: `what`, then its own message."""
    return lambda m: f"{what}: {m}"


def check_parity(
    model_name: str,
    world: int,
    *,
    sharding: str = "auto",
    optimizer=("sgd", 0.05, 0.0),
    steps: int = 3,
    batch: int = 8,
    rows_cap: int = 200,
    kernels: str = "generated",
    atol: float = 1e-5,
    pipeline: bool = False,
    passes: str = "",
    device: str = "cpu",
    backend: str | None = None,
    sizes=None,
    rows: str = "jagged",
    expect_ops: Sequence[str] = (),
    replicated_grads: str = "with-dense",
    transport: str = "auto",
    expect_transport: str | None = None,
    lr_gamma: float | None = None,
) -> None:
    """Raise AssertionError if the compiled run diverges from the single-process reference (on the CPU).

    `device="cuda"` trains the compiled side on the GPU; with `backend` (say "nccl") the ranks
    join a process group even when `world` is 1, so the plan's collectives run too. `sizes`
    (`sizes[step][rank]`, then `steps = len(sizes)`) gives each rank's local batch at each step;
    the model is compiled on an example batch of `batch` samples either way. `rows` and
    `replicated_grads` are `CompileOptions.rows` (how unpooled tables' rows travel) and
    `CompileOptions.replicated_grads` (where replicated tables' gradients are summed); `expect_ops` are op names the
    compiled plan must hold (that the lowering under test is the one that ran). `transport` is
    `CompileOptions.transport`; `expect_transport` ("shm" or "gloo"), the one every rank must have run.
    `optimizer`: a `sparselift.optim` record (or `(kind, lr, eps)`), or `{table param: (class,
    kwargs)}` applied to the model's tables with `apply_optimizer_in_backward` before compiling;
    the dense parameters train with SGD at its (first) learning rate. `lr_gamma`: the tables'
    learning rate is scheduled (`StepLR`, this factor a step) on both sides.
    """
    from sparselift.runtime.distributed import launch

    if sizes is not None:
        steps = len(sizes)
        if any(len(step) != world for step in sizes):
            raise ValueError(f"sizes must give {world} local batch sizes per step, got {sizes}")
    if world == 1 and backend is None:
        results = [
            compiled_worker(
                0,
                1,
                model_name,
                steps,
                batch,
                rows_cap,
                sharding,
                optimizer,
                0,
                kernels,
                pipeline,
                passes,
                device,
                sizes,
                rows,
                replicated_grads,
                transport,
                lr_gamma,
            )
        ]
    else:
        results = launch(
            compiled_worker,
            world,
            model_name,
            steps,
            batch,
            rows_cap,
            sharding,
            optimizer,
            0,
            kernels,
            pipeline,
            passes,
            device,
            sizes,
            rows,
            replicated_grads,
            transport,
            lr_gamma,
            backend=backend or "gloo",
            timeout_s=120,
        )
    ref = reference_run(
        model_name,
        world,
        steps,
        batch,
        rows_cap,
        optimizer,
        table_names=results[0]["table_names"],
        sizes=sizes,
        lr_gamma=lr_gamma,
    )
    for rank, res in enumerate(results):
        if replicated_grads == "own" and "dense_grad" not in passes:
            assert not res["riding"], f"rank {rank}'s plan sums replicated gradients with the dense ones"
        if expect_transport is not None:
            assert res["transport"] == expect_transport, f"rank {rank} exchanged over {res['transport']}"
        missing = [name for name in expect_ops if name not in res["ops"]]
        assert not missing, f"rank {rank}'s plan has no {', '.join(missing)} (it has {', '.join(res['ops'])})"
        assert len(res["outputs"]) == steps, f"rank {rank} ran {len(res['outputs'])} of {steps} steps"
        for step, (got, want) in enumerate(zip(res["outputs"], ref["outputs"])):
            torch.testing.assert_close(
                got,
                want[rank],
                atol=atol,
                rtol=1e-4,
                msg=_prefixed(f"output of step {step} on rank {rank}"),
            )
        for name, want in ref["tables"].items():
            torch.testing.assert_close(
                res["tables"][name],
                want,
                atol=atol,
                rtol=1e-4,
                msg=_prefixed(f"table {name} on rank {rank}"),
            )
        for name, want in ref["grads"].items():
            torch.testing.assert_close(
                res["grads"][name],
                want,
                atol=atol,
                rtol=1e-4,
                msg=_prefixed(f"dense grad {name} on rank {rank}"),
            )
