"""Kernel benchmark: SparseLift's generated C kernels vs FBGEMM TBE (CPU) vs torch EmbeddingBag.

`python -m sparselift.bench.kernels [--json FILE] [--repeats N] [--quick] [--cases NAME,...]`
(`sparselift bench kernels` calls `main(argv)`).

Every system runs on one thread (`torch.set_num_threads(1)`, the C kernels with one OpenMP
thread) over the same tables, ids (Zipf-skewed, alpha 1.05, hot rows scattered over the table
by a fixed permutation) and pooled gradients. Repeats are interleaved (A, B, C, A, B, C, ...)
and the medians reported, for

- `fwd`: pooled sum lookup of every table (one fused C call; one TBE call; one
  `nn.EmbeddingBag` call per table), autograd on as in training; `fwd_nograd`: the same under
  `torch.no_grad()` (the torch systems skip their autograd bookkeeping; the C path is the same);
- `fwd_bwd_sgd`: forward, then backward with the optimizer update (C: one fused
  backward+SGD call; TBE: `EXACT_SGD` fused into backward; torch: sparse gradients +
  `torch.optim.SGD.step()` + `zero_grad`);
- `fwd_bwd_rowwise_adagrad`: the same with row-wise Adagrad (C and TBE
  `EXACT_ROWWISE_ADAGRAD`; torch has no row-wise Adagrad).

Before timing, the C forward is checked against FBGEMM's on the same weights.
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

__all__ = ["CASES", "Case", "main", "run"]

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
    def forward(self):
        raise NotImplementedError

    def forward_nograd(self):
        import torch

        with torch.no_grad():
            return self.forward()


class Ours(_System):
    name = "sparselift-c"

    def __init__(self, case: Case, data: dict, optimizer: str):
        from sparselift.runtime.kernels import GeneratedKernels, TableSpec

        self.case, self.optimizer = case, optimizer
        self.tables = [w.clone() for w in data["tables"]]
        self.states = [torch_zeros(r) for r in case.rows] if optimizer == "rowwise_adagrad" else [None] * len(case.rows)
        self.lengths, self.ids, self.grads = data["lengths"], data["ids"], data["grads"]
        self.slots = [[t] for t in range(len(case.rows))]
        self.kernels = GeneratedKernels([TableSpec(case.dim, "f32", "i64", "sum", False, optimizer)], nthreads=1)

    def forward(self):
        return self.kernels.fused_lookup(
            self.tables, self.lengths, self.ids, None, self.slots, len(self.tables), self.case.bags, "sum"
        )

    def step(self):
        self.forward()
        self.kernels.fused_lookup_update(
            self.tables,
            self.states,
            self.lengths,
            self.ids,
            None,
            self.grads,
            self.slots,
            len(self.tables),
            self.case.bags,
            "sum",
            self.optimizer,
            LR,
            EPS if self.optimizer == "rowwise_adagrad" else 0.0,
        )


def torch_zeros(n):
    import torch

    return torch.zeros(n, dtype=torch.float32)


class Fbgemm(_System):
    name = "fbgemm-tbe"

    def __init__(self, case: Case, data: dict, optimizer: str):
        import torch
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            OptimType,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        opt = {"sgd": OptimType.EXACT_SGD, "rowwise_adagrad": OptimType.EXACT_ROWWISE_ADAGRAD}[optimizer]
        kwargs = {"eps": EPS} if optimizer == "rowwise_adagrad" else {}
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(r, case.dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in case.rows],
            optimizer=opt,
            learning_rate=LR,
            pooling_mode=PoolingMode.SUM,
            **kwargs,
        )
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


class TorchEmbeddingBag(_System):
    name = "torch-embbag"

    def __init__(self, case: Case, data: dict, optimizer: str):
        import torch

        if optimizer != "sgd":
            raise NotImplementedError("torch has no row-wise Adagrad")
        self.torch = torch
        self.bags = []
        for w in data["tables"]:
            eb = torch.nn.EmbeddingBag(w.shape[0], w.shape[1], mode="sum", sparse=True)
            with torch.no_grad():
                eb.weight.copy_(w)
            self.bags.append(eb)
        self.opt = torch.optim.SGD([eb.weight for eb in self.bags], lr=LR)
        t, b = len(case.rows), case.bags
        lengths = data["lengths"].view(t, b).to(torch.int64)
        self.inputs = []
        start = 0
        for i in range(t):
            n = int(lengths[i].sum())
            ids = data["ids"][start : start + n]
            offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths[i], 0)[:-1]])
            self.inputs.append((ids, offs))
            start += n
        self.grads = data["grads"]

    def forward(self):
        return [eb(ids, offs) for eb, (ids, offs) in zip(self.bags, self.inputs)]

    def step(self):
        outs = self.forward()
        self.torch.autograd.backward(outs, self.grads)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


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


def run_case(case: Case, repeats: int, warmup: int, with_torch: bool, log=print) -> dict:
    import torch

    data = make_inputs(case)
    n_ids = data["ids"].numel()
    log(
        f"[{case.name}] {len(case.rows)} tables, dim {case.dim}, {case.bags} bags, {n_ids} ids "
        f"({n_ids / (len(case.rows) * case.bags):.1f} per bag)"
    )
    systems: dict[str, dict[str, object]] = {"sparselift-c": {}, "fbgemm-tbe": {}}
    if with_torch:
        systems["torch-embbag"] = {}
    makers = {"sparselift-c": Ours, "fbgemm-tbe": Fbgemm, "torch-embbag": TorchEmbeddingBag}
    notes: list[str] = []
    for name in systems:
        for opt in ("sgd", "rowwise_adagrad"):
            try:
                systems[name][opt] = makers[name](case, data, opt)
            except NotImplementedError:
                pass
            except Exception as e:  # an optional peer that fails to build is reported, not fatal
                notes.append(f"{name} {opt}: {type(e).__name__}: {e}")
                log(f"  (skipping {name} {opt}: {e})")
    diff = (
        _check_forward(systems["sparselift-c"]["sgd"], systems["fbgemm-tbe"]["sgd"])
        if "sgd" in systems["fbgemm-tbe"]
        else float("nan")
    )
    log(f"  max |C forward - FBGEMM forward| = {diff:.3g}")
    upd_diff = {}
    for opt in ("sgd", "rowwise_adagrad"):
        if opt in systems["fbgemm-tbe"]:
            upd_diff[opt] = _check_step(case, data, opt)
            log(f"  max |C table - FBGEMM table| after one {opt} step = {upd_diff[opt]:.3g}")
    measures = [
        ("fwd", "sgd", "forward"),
        ("fwd_nograd", "sgd", "forward_nograd"),
        ("fwd_bwd_sgd", "sgd", "step"),
        ("fwd_bwd_rowwise_adagrad", "rowwise_adagrad", "step"),
    ]
    samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m, _, _ in measures} for s in systems}
    for rep in range(warmup + repeats):
        for metric, opt, method in measures:
            for name, objs in systems.items():  # interleaved: A, B, C, A, B, C, ...
                obj = objs.get(opt)
                if obj is None:
                    continue
                ms = _time(getattr(obj, method))
                if rep >= warmup:
                    samples[name][metric].append(ms)
    ms = {s: {m: round(statistics.median(v), 3) for m, v in d.items() if v} for s, d in samples.items()}
    spread = {s: {m: [round(min(v), 3), round(max(v), 3)] for m, v in d.items() if v} for s, d in samples.items()}

    def speedup(metric):
        a, b = ms["sparselift-c"].get(metric), ms["fbgemm-tbe"].get(metric)
        return round(b / a, 3) if a and b else None

    del torch
    return {
        "name": case.name,
        "tables": len(case.rows),
        "rows": list(case.rows),
        "dim": case.dim,
        "bags": case.bags,
        "ids": n_ids,
        "speedup_vs_fbgemm_fwd": speedup("fwd"),
        "speedup_vs_fbgemm_fwd_bwd": speedup("fwd_bwd_sgd"),
        "speedup_vs_fbgemm_fwd_bwd_rowwise_adagrad": speedup("fwd_bwd_rowwise_adagrad"),
        "speedup_vs_fbgemm_fwd_nograd": speedup("fwd_nograd"),
        "ms": ms,
        "min_max_ms": spread,
        "max_abs_diff_fwd_vs_fbgemm": diff,
        "max_abs_diff_after_step_vs_fbgemm": upd_diff,
        "notes": notes,
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
    cols = [
        ("fwd", "fwd"),
        ("fwd_nograd", "fwd no-grad"),
        ("fwd_bwd_sgd", "fwd+bwd+SGD"),
        ("fwd_bwd_rowwise_adagrad", "fwd+bwd+RwAdagrad"),
    ]
    lines = [f"| case | system | {' | '.join(c[1] + ' ms' for c in cols)} |", "|---|---|" + "---:|" * len(cols)]
    for r in results:
        for system, vals in r["ms"].items():
            cells = [f"{vals[c]:.2f}" if c in vals else "-" for c, _ in cols]
            lines.append(f"| {r['name']} | {system} | {' | '.join(cells)} |")
        sp = [
            r["speedup_vs_fbgemm_fwd"],
            r["speedup_vs_fbgemm_fwd_nograd"],
            r["speedup_vs_fbgemm_fwd_bwd"],
            r["speedup_vs_fbgemm_fwd_bwd_rowwise_adagrad"],
        ]
        cells = [f"**{s:.2f}x**" if s else "-" for s in sp]
        lines.append(f"| {r['name']} | speedup C vs FBGEMM | {' | '.join(cells)} |")
    return "\n".join(lines)


def run(case_names: Sequence[str], repeats: int, warmup: int, with_torch: bool, log=print) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    with torch.autograd.set_grad_enabled(True):
        return [run_case(CASES[n], repeats, warmup, with_torch, log) for n in case_names]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparselift bench kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed repeats per system and metric (default 15, quick 3)"
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed repeats first (default 2, quick 1)")
    parser.add_argument("--quick", action="store_true", help="few repeats, no torch EmbeddingBag on dlrm-bench")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch EmbeddingBag baseline")
    args = parser.parse_args(argv)
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
    results = run(names, repeats, warmup, with_torch=not args.no_torch)
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
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
