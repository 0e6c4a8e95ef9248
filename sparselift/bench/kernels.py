"""Kernel benchmark: SparseLift's generated C kernels vs FBGEMM TBE (CPU) vs torch EmbeddingBag.

`python -m sparselift.bench.kernels [--json FILE] [--repeats N] [--quick] [--cases NAME,...]
[--optimizers NAME,...] [--no-torch]` (`sparselift bench kernels` calls `main(argv)`).

Every system runs on one thread (`torch.set_num_threads(1)`, the C kernels with one OpenMP
thread) over the same tables, ids (Zipf-skewed, alpha 1.05, hot rows scattered over the table
by a fixed permutation) and pooled gradients. Repeats are interleaved (A, B, C, A, B, C, ...)
and the medians reported, one row per metric:

- `fwd`: pooled sum lookup of every table (one fused C call; one TBE call; one
  `nn.EmbeddingBag` call per table), autograd on as in training; `fwd_nograd`: the same under
  `torch.no_grad()` (the torch systems skip their autograd bookkeeping; the C path is the same);
- `fwd_bwd_<optimizer>`, for each sparse optimizer `--optimizers` names (default all six: `sgd`,
  `adagrad`, `rowwise_adagrad`, `adam`, `adamw`, `partial_rowwise_adam`): forward, then backward
  with the optimizer's update, every system with the same hyperparameters (lr 0.01, eps 1e-8,
  betas (0.9, 0.999), AdamW's decoupled weight decay 0.01, the others' none):
  - C: one fused backward + update call (`CKernels.lookup_update` with
    `UpdateArgs(OptimizerArgs.of(record, step))`, the step count growing by one per call, so the
    Adam family's bias corrections move);
  - FBGEMM: the TBE optimizer fused into backward where its CPU build has it: `EXACT_SGD`,
    `EXACT_ADAGRAD`, `EXACT_ROWWISE_ADAGRAD`. fbgemm-gpu-cpu 1.8.0 refuses `ADAM` (AdamW is
    `ADAM` with decoupled weight decay) and `PARTIAL_ROWWISE_ADAM` on CPU ("Optimizer adam is
    not supported in CPU mode."): those cells are n/a, with the message TBE gave;
  - torch: `nn.EmbeddingBag(sparse=True)`, sparse gradients, the optimizer's `step()` and
    `zero_grad`: `torch.optim.SGD`, `torch.optim.Adagrad`, and for Adam, AdamW and partial
    row-wise Adam the fastest eager path, `torch.optim.SparseAdam` (`Adam`/`AdamW` refuse sparse
    gradients), which is another update (a footnote says how its numbers differ); torch has no
    row-wise Adagrad (n/a).

A system without an optimizer prints "n/a" with the reason in a footnote (the JSON's
`not_available`), never a dropped row; a stand-in is footnoted too (`stand_ins`). The speedup
columns are C over each peer, per row, from the same interleaved run.

Before timing, the C forward is checked against FBGEMM's on the same weights, and one training
step from the same weights against FBGEMM's (SGD, Adagrad, row-wise Adagrad) and against
`torch.optim.Adam` / `AdamW` on dense gradients, on the touched rows (from a zero state, lazy
Adam's first step is theirs there).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CASES", "OPTIMIZERS", "Case", "main", "optimizer_record", "run"]

KAGGLE_CARDINALITIES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)


@dataclass(frozen=True)
class Case:
    name: str
    rows: tuple[int, ...]
    dim: int
    bags: int  # bags per table (the batch)
    pooling: tuple[int, int]  # bag length drawn uniformly from [lo, hi]


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("4x100k x64", (100_000,) * 4, 64, 4096, (1, 39)),
        Case("kaggle-onehot", tuple(min(c, 100_000) for c in KAGGLE_CARDINALITIES), 16, 4096, (1, 1)),
        Case("dlrm-bench", (100_000,) * 8, 64, 2048, (100, 100)),
    )
}

ZIPF_ALPHA = 1.05
LR = 0.01
EPS = 1e-8
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam", "adamw", "partial_rowwise_adam")  # OptimizerKind values
OPTIMIZER_NAMES = tuple(o.replace("_", "-") for o in OPTIMIZERS)  # as users type them
ADAM_FAMILY = ("adam", "adamw", "partial_rowwise_adam")


def optimizer_record(kind: str):
    """The `sparselift.optim` record every system runs for `kind`: lr `LR`, eps `EPS` (FBGEMM's
    default; SGD has none), the record's other defaults."""
    from sparselift.optim import RECORDS
    from sparselift.optim_rules import OptimizerKind

    record = RECORDS[OptimizerKind(kind)]
    return record(lr=LR) if kind == "sgd" else record(lr=LR, eps=EPS)


def metric_of(kind: str) -> str:
    return f"fwd_bwd_{kind}"


def metric_label(metric: str) -> str:
    from sparselift.optim_rules import rule_for

    if metric.startswith("fwd_bwd_"):
        title = rule_for(metric.removeprefix("fwd_bwd_")).title
        return "fwd+bwd+" + {"RowWiseAdagrad": "RwAdagrad", "PartialRowWiseAdam": "PRwAdam"}.get(title, title)
    return {"fwd": "fwd", "fwd_nograd": "fwd no-grad"}[metric]


def _zipf_ids(torch, rows: int, n: int, gen) -> object:
    ranks = torch.arange(1, rows + 1, dtype=torch.float64)
    cdf = torch.cumsum(ranks.pow(-ZIPF_ALPHA), 0)
    cdf /= cdf[-1].clone()
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    r = torch.searchsorted(cdf, u).clamp_(max=rows - 1)
    perm = torch.randperm(rows, generator=gen)
    return perm[r]


def make_inputs(case: Case, seed: int = 0) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    t, b = len(case.rows), case.bags
    lo, hi = case.pooling
    lengths = torch.randint(lo, hi + 1, (t * b,), generator=gen, dtype=torch.int32)
    per_table = lengths.view(t, b).sum(1).tolist()
    ids = torch.cat([_zipf_ids(torch, r, n, gen) for r, n in zip(case.rows, per_table)]).to(torch.int64)
    tables = [torch.randn(r, case.dim, generator=gen) * 0.01 for r in case.rows]
    grads = [torch.randn(b, case.dim, generator=gen) for _ in case.rows]
    return {"lengths": lengths, "ids": ids, "tables": tables, "grads": grads, "per_table": per_table}


# ---- systems ---------------------------------------------------------------------------------


class _System:
    stand_in: str | None = None  # set where the system runs another update in the optimizer's place

    def forward(self):
        raise NotImplementedError

    def forward_nograd(self):
        import torch

        with torch.no_grad():
            return self.forward()


def _zero_state(rows: int, width: int):
    """A table's optimizer state as the C kernels take it: `rows * W` floats (`state_slots`),
    None when the optimizer keeps none (SGD)."""
    import torch

    if width == 0:
        return None
    return torch.zeros(rows * width, dtype=torch.float32)  # the rule's states whole, one after the other


class Ours(_System):
    name = "sparselift-c"

    def __init__(self, case: Case, data: dict, optimizer: str):
        from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs
        from sparselift.optim_rules import rule_for
        from sparselift.runtime.kernels import CKernels, TableSpec

        self.case, self.optimizer = case, optimizer
        self.record = optimizer_record(optimizer)
        # The update at step count `step` (the Adam family's bias corrections move with it).
        self._update = lambda step: UpdateArgs(OptimizerArgs.of(self.record, step))
        self.tables = [w.clone() for w in data["tables"]]
        width = rule_for(optimizer).state_width(case.dim)
        self.states = [_zero_state(r, width) for r in case.rows]
        self.steps = 0  # the optimizer's step count (the Adam family's bias corrections read it)
        self.lengths, self.ids, self.grads = data["lengths"], data["ids"], data["grads"]
        # One segment of one feature per table (table t reads feature t), `case.bags` samples each.
        self.bags = RoutedBags(self.lengths, self.ids, None, len(self.tables), case.bags)
        self.args = [TableArgs(f"t{t}", w, (t,), "sum", st) for t, (w, st) in enumerate(zip(self.tables, self.states))]
        self.kernels = CKernels([TableSpec(case.dim, "f32", "i64", "sum", False, optimizer)], nthreads=1)

    def forward(self):
        return self.kernels.lookup(self.bags, self.args)

    def step(self):
        self.forward()
        self.steps += 1
        self.kernels.lookup_update(self.bags, self.args, self.grads, self._update(self.steps))


# TBE's optimizer for each kind (AdamW: ADAM with decoupled weight decay).
FBGEMM_OPTIMIZERS = {
    "sgd": "EXACT_SGD",
    "adagrad": "EXACT_ADAGRAD",
    "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
    "adam": "ADAM",
    "adamw": "ADAM",
    "partial_rowwise_adam": "PARTIAL_ROWWISE_ADAM",
}


def _fbgemm_kwargs(kind: str) -> dict:
    """TBE's optimizer arguments for `kind`, the hyperparameters of `optimizer_record(kind)`."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import OptimType, WeightDecayMode

    h = optimizer_record(kind).hyperparameters()
    kwargs = {"optimizer": getattr(OptimType, FBGEMM_OPTIMIZERS[kind]), "learning_rate": h["lr"]}
    if kind != "sgd":
        kwargs["eps"] = h["eps"]
    if kind in ADAM_FAMILY:
        decay = WeightDecayMode.DECOUPLE if kind == "adamw" else WeightDecayMode.L2
        kwargs.update(beta1=h["beta1"], beta2=h["beta2"], weight_decay=h["weight_decay"])
        kwargs["weight_decay_mode"] = decay if h["weight_decay"] else WeightDecayMode.NONE
    return kwargs


class Fbgemm(_System):
    name = "fbgemm-tbe"

    def __init__(self, case: Case, data: dict, optimizer: str):
        import fbgemm_gpu
        import torch
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        try:
            self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
                [(r, case.dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in case.rows],
                pooling_mode=PoolingMode.SUM,
                **_fbgemm_kwargs(optimizer),
            )
        except (AssertionError, NotImplementedError, ValueError) as e:  # what TBE says of an optimizer it lacks
            decoupled = " (decoupled weight decay)" if optimizer == "adamw" else ""
            raise NotImplementedError(
                f"FBGEMM {getattr(fbgemm_gpu, '__version__', '?')}'s CPU TBE has no "
                f"{FBGEMM_OPTIMIZERS[optimizer]}{decoupled} ({type(e).__name__}: {e})"
            ) from None
        with torch.no_grad():
            for dst, src in zip(self.tbe.split_embedding_weights(), data["tables"]):
                dst.copy_(src)
        lengths = data["lengths"].to(torch.int64)
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        self.ids = data["ids"]
        self.grad = torch.cat(data["grads"], dim=1)  # [B, T * D], table-major columns

    def forward(self):
        return self.tbe(self.ids, self.offsets)

    def step(self):
        out = self.forward()
        out.backward(self.grad)


_SPARSE_ADAM = (
    "torch.optim.SparseAdam stands in (torch.optim.{name} refuses sparse gradients): lazy Adam, but eps is added "
    "before the bias correction"
)
TORCH_STAND_INS = {
    "adam": _SPARSE_ADAM.format(name="Adam") + ", so its numbers differ",
    "adamw": _SPARSE_ADAM.format(name="AdamW") + ", and without AdamW's decoupled weight decay: its numbers differ",
    "partial_rowwise_adam": "torch has no partial row-wise Adam; torch.optim.SparseAdam stands in (a second moment "
    "per element, eps added before the bias correction): its numbers differ",
}


def _torch_optimizer(kind: str, params: list):
    """The torch optimizer of `kind` on sparse gradients (or its stand-in, `TORCH_STAND_INS`)."""
    import torch

    h = optimizer_record(kind).hyperparameters()
    if kind == "sgd":
        return torch.optim.SGD(params, lr=h["lr"])
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=h["lr"], eps=h["eps"])
    if kind == "rowwise_adagrad":
        raise NotImplementedError("torch has no row-wise Adagrad")
    return torch.optim.SparseAdam(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])


def _bag_inputs(case: Case, data: dict) -> list[tuple]:
    """Each table's (ids, offsets) for `nn.EmbeddingBag` (offsets: bag starts)."""
    import torch

    lengths = data["lengths"].view(len(case.rows), case.bags).to(torch.int64)
    ids = torch.split(data["ids"], data["per_table"])
    return [(i, torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(n, 0)[:-1]])) for i, n in zip(ids, lengths)]


class TorchEmbeddingBag(_System):
    name = "torch-embbag"

    def __init__(self, case: Case, data: dict, optimizer: str):
        import torch

        self.torch = torch
        self.bags = []
        for w in data["tables"]:
            eb = torch.nn.EmbeddingBag(w.shape[0], w.shape[1], mode="sum", sparse=True)
            with torch.no_grad():
                eb.weight.copy_(w)
            self.bags.append(eb)
        self.opt = _torch_optimizer(optimizer, [eb.weight for eb in self.bags])
        self.stand_in = TORCH_STAND_INS.get(optimizer)
        self.inputs = _bag_inputs(case, data)
        self.grads = data["grads"]

    def forward(self):
        return [eb(ids, offs) for eb, (ids, offs) in zip(self.bags, self.inputs)]

    def step(self):
        outs = self.forward()
        self.torch.autograd.backward(outs, self.grads)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


SYSTEMS: dict[str, type[_System]] = {"sparselift-c": Ours, "fbgemm-tbe": Fbgemm, "torch-embbag": TorchEmbeddingBag}
PEER_LABELS = {"fbgemm-tbe": "FBGEMM", "torch-embbag": "torch"}


# ---- driver ----------------------------------------------------------------------------------


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _check_forward(ours: Ours, fb: Fbgemm) -> float:
    import torch

    a = torch.cat(ours.forward(), dim=1)
    with torch.no_grad():
        b = fb.forward()
    return float((a - b).abs().max())


def _check_step(case: Case, data: dict, optimizer: str) -> float:
    """One training step of the C kernels and of FBGEMM from the same weights: largest difference."""
    ours, fb = Ours(case, data, optimizer), Fbgemm(case, data, optimizer)
    ours.step()
    fb.step()
    diffs = [float((a - b.detach()).abs().max()) for a, b in zip(ours.tables, fb.tbe.split_embedding_weights())]
    return max(diffs)


def _check_step_vs_torch(case: Case, data: dict, optimizer: str) -> float:
    """One step of the C Adam / AdamW and of `torch.optim.Adam` / `AdamW` on dense gradients from
    the same weights and a zero state: the largest difference on the rows the batch touched."""
    import torch
    import torch.nn.functional as F

    ours = Ours(case, data, optimizer)
    ours.step()
    h = optimizer_record(optimizer).hyperparameters()
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    worst = 0.0
    for k, ((ids, offs), w, g) in enumerate(zip(_bag_inputs(case, data), data["tables"], data["grads"])):
        p = torch.nn.Parameter(w.clone())
        F.embedding_bag(ids, p, offs, mode="sum").backward(g)
        cls([p], lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], weight_decay=h["weight_decay"]).step()
        touched = ids.unique()
        worst = max(worst, float((ours.tables[k][touched] - p.detach()[touched]).abs().max()))
    return worst


def _build(case: Case, data: dict, kinds: Sequence[str], with_torch: bool, log) -> tuple[dict, dict, dict]:
    """Every system for SGD (the forward rows run it) and for each of `kinds`; what a system
    lacks (metric -> reason) and where it runs a stand-in (metric -> what differs)."""
    names = [n for n in SYSTEMS if with_torch or n != "torch-embbag"]
    systems: dict[str, dict[str, _System]] = {n: {} for n in names}
    missing: dict[str, dict[str, str]] = {n: {} for n in names}
    stand_ins: dict[str, dict[str, str]] = {n: {} for n in names}
    for name in names:
        for kind in dict.fromkeys(("sgd", *kinds)):
            try:
                obj = SYSTEMS[name](case, data, kind)
            except Exception as e:  # a peer without the optimizer (or failing to build) is reported, not fatal
                reason = str(e) if isinstance(e, NotImplementedError) else f"{type(e).__name__}: {e}"
                log(f"  {name} has no {kind}: {reason}")
                lacking = [metric_of(kind)] if kind in kinds else []
                for metric in lacking + (["fwd", "fwd_nograd"] if kind == "sgd" else []):
                    missing[name][metric] = reason
                continue
            systems[name][kind] = obj
            if obj.stand_in and kind in kinds:
                stand_ins[name][metric_of(kind)] = obj.stand_in
    return systems, missing, stand_ins


def _checks(case: Case, data: dict, systems: dict, kinds: Sequence[str], log) -> dict:
    """The agreement checks run before timing (see the module docstring)."""
    fb = systems.get("fbgemm-tbe", {})
    diff = _check_forward(systems["sparselift-c"]["sgd"], fb["sgd"]) if "sgd" in fb else float("nan")
    log(f"  max |C forward - FBGEMM forward| = {diff:.3g}")
    vs_fbgemm, vs_torch = {}, {}
    for kind in kinds:
        if kind in fb:
            vs_fbgemm[kind] = _check_step(case, data, kind)
            log(f"  max |C table - FBGEMM table| after one {kind} step = {vs_fbgemm[kind]:.3g}")
        if kind in ("adam", "adamw"):
            vs_torch[kind] = _check_step_vs_torch(case, data, kind)
            label = "AdamW" if kind == "adamw" else "Adam"
            log(f"  max |C table - torch.optim.{label} table| on touched rows after one step = {vs_torch[kind]:.3g}")
    return {
        "max_abs_diff_fwd_vs_fbgemm": diff,
        "max_abs_diff_after_step_vs_fbgemm": vs_fbgemm,
        "max_abs_diff_after_step_vs_torch": vs_torch,
    }


def _measure(systems: dict, measures: Sequence[tuple[str, str, str]], repeats: int, warmup: int) -> dict:
    """Interleaved timings: per repeat, per metric, every system once (A, B, C, A, B, C, ...)."""
    samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m, _, _ in measures} for s in systems}
    for rep in range(warmup + repeats):
        for metric, opt, method in measures:
            for name, objs in systems.items():
                obj = objs.get(opt)
                if obj is None:
                    continue
                ms = _time(getattr(obj, method))
                if rep >= warmup:
                    samples[name][metric].append(ms)
    return samples


def run_case(
    case: Case, repeats: int, warmup: int, with_torch: bool, kinds: Sequence[str] = OPTIMIZERS, log=print
) -> dict:
    data = make_inputs(case)
    n_ids = data["ids"].numel()
    log(
        f"[{case.name}] {len(case.rows)} tables, dim {case.dim}, {case.bags} bags, {n_ids} ids "
        f"({n_ids / (len(case.rows) * case.bags):.1f} per bag)"
    )
    systems, missing, stand_ins = _build(case, data, kinds, with_torch, log)
    checks = _checks(case, data, systems, kinds, log)
    measures = [("fwd", "sgd", "forward"), ("fwd_nograd", "sgd", "forward_nograd")]
    measures += [(metric_of(k), k, "step") for k in kinds]
    samples = _measure(systems, measures, repeats, warmup)
    ms = {s: {m: round(statistics.median(v), 3) for m, v in d.items() if v} for s, d in samples.items()}
    spread = {s: {m: [round(min(v), 3), round(max(v), 3)] for m, v in d.items() if v} for s, d in samples.items()}
    metrics = [m for m, _, _ in measures]

    def speedups(peer: str) -> dict[str, float | None]:
        ours, theirs = ms.get("sparselift-c", {}), ms.get(peer, {})
        return {m: round(theirs[m] / ours[m], 3) if ours.get(m) and theirs.get(m) else None for m in metrics}

    vs = {peer: speedups(peer) for peer in systems if peer != "sparselift-c"}
    fb = vs.get("fbgemm-tbe", {})
    return {
        "name": case.name,
        "tables": len(case.rows),
        "rows": list(case.rows),
        "dim": case.dim,
        "bags": case.bags,
        "ids": n_ids,
        "metrics": metrics,
        # the earlier runs' keys, unchanged: fwd+bwd is SGD's
        "speedup_vs_fbgemm_fwd": fb.get("fwd"),
        "speedup_vs_fbgemm_fwd_bwd": fb.get("fwd_bwd_sgd"),
        "speedup_vs_fbgemm_fwd_bwd_rowwise_adagrad": fb.get("fwd_bwd_rowwise_adagrad"),
        "speedup_vs_fbgemm_fwd_nograd": fb.get("fwd_nograd"),
        "speedup_vs_fbgemm": fb,
        "speedup_vs_torch": vs.get("torch-embbag"),
        "ms": ms,
        "min_max_ms": spread,
        "not_available": {s: d for s, d in missing.items() if d},
        "stand_ins": {s: d for s, d in stand_ins.items() if d},
        **checks,
    }


def machine_info() -> dict:
    import torch

    info = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads_per_system": 1,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import fbgemm_gpu

        info["fbgemm_gpu"] = getattr(fbgemm_gpu, "__version__", "?")
    except Exception:
        info["fbgemm_gpu"] = None
    try:
        import subprocess

        info["cc"] = subprocess.run(
            [os.environ.get("SPARSELIFT_CC", "cc"), "--version"], capture_output=True, text=True
        ).stdout.splitlines()[0]
    except Exception:
        info["cc"] = None
    return info


def format_table(results: Sequence[dict]) -> str:
    """One row per case and metric: each system's median ms, then C's speedup over each peer.
    A missing optimizer is "n/a" and a stand-in is marked, both with a numbered footnote."""
    systems = [s for s in SYSTEMS if any(s in r["ms"] or s in r.get("not_available", {}) for r in results)]
    peers = [s for s in systems if s != "sparselift-c"]
    notes: dict[str, int] = {}

    def mark(system: str, metric: str, text: str) -> str:
        return f"[{notes.setdefault(f'{system}, {metric_label(metric)}: {text}', len(notes) + 1)}]"

    head = ["case", "metric", *(f"{s} ms" for s in systems), *(f"C vs {PEER_LABELS[p]}" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for r in results:
        for metric in r.get("metrics", ("fwd", "fwd_nograd", "fwd_bwd_sgd", "fwd_bwd_rowwise_adagrad")):
            cells = [r["name"], metric_label(metric)]
            for s in systems:
                value = r["ms"].get(s, {}).get(metric)
                missing = r.get("not_available", {}).get(s, {}).get(metric)
                stand_in = r.get("stand_ins", {}).get(s, {}).get(metric)
                if value is not None:
                    cells.append(f"{value:.2f}" + (f" {mark(s, metric, stand_in)}" if stand_in else ""))
                else:
                    cells.append(f"n/a {mark(s, metric, missing)}" if missing else "-")
            for p in peers:
                ratio = (r.get(f"speedup_vs_{PEER_LABELS[p].lower()}") or {}).get(metric)
                cells.append(f"**{ratio:.2f}x**" if ratio else "n/a")
            lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines.append("")
        lines += [f"[{n}] {text}" for text, n in notes.items()]
    return "\n".join(lines)


def run(
    case_names: Sequence[str],
    repeats: int,
    warmup: int,
    with_torch: bool,
    kinds: Sequence[str] = OPTIMIZERS,
    log=print,
) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    with torch.autograd.set_grad_enabled(True):
        return [run_case(CASES[n], repeats, warmup, with_torch, kinds, log) for n in case_names]


def _optimizer_names(text: str) -> list[str]:
    """`--optimizers`: comma-separated names, dashes or underscores (`rowwise-adagrad`)."""
    names = [t.strip().lower().replace("-", "_") for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown optimizer(s) {unknown or text!r}; choose from {', '.join(OPTIMIZER_NAMES)}"
        )
    return [o for o in OPTIMIZERS if o in names]  # the table's order, whatever the option's


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparselift bench kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed repeats per system and metric (default 15, quick 3)"
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed repeats first (default 2, quick 1)")
    parser.add_argument("--quick", action="store_true", help="few repeats (3, after 1 warm-up)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}")
    parser.add_argument(
        "--optimizers",
        type=_optimizer_names,
        default=list(OPTIMIZERS),
        help="the fwd+bwd rows to run, comma-separated (dashes or underscores): "
        f"{', '.join(OPTIMIZER_NAMES)} (default: all)",
    )
    parser.add_argument("--no-torch", action="store_true", help="skip the torch EmbeddingBag baseline")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"sparselift bench kernels: unknown case(s) {unknown}; choose from {list(CASES)}", file=sys.stderr)
        return 2
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 15)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if repeats < 1 or warmup < 0:
        print("sparselift bench kernels: --repeats must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    try:
        import fbgemm_gpu  # noqa: F401
    except Exception as e:
        print(
            f"sparselift bench kernels: fbgemm_gpu is needed for the comparison ({e}); "
            "install the bench extras (fbgemm-gpu-cpu==1.8.0)",
            file=sys.stderr,
        )
        return 2
    results = run(names, repeats, warmup, with_torch=not args.no_torch, kinds=args.optimizers)
    print()
    print(format_table(results))
    command = "python -m sparselift.bench.kernels " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {
        "cases": results,
        "machine": machine_info(),
        "command": command.strip(),
        "repeats": repeats,
        "warmup": warmup,
        "zipf_alpha": ZIPF_ALPHA,
        "optimizers": {k: optimizer_record(k).hyperparameters() for k in args.optimizers},
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
