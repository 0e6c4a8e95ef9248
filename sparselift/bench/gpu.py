"""GPU check: the Triton kernels against the reference lowering and a bandwidth floor, and
compiled training on CUDA against single-process training.

`sparselift bench gpu [--json FILE] [--quick]` (or `python -m sparselift.bench.gpu`). It needs a
CUDA GPU and says so (exit 2) without one. Four sections, each recorded even if another fails:

- `copy`: the device-to-device copy bandwidth (bytes read + written per second), measured
  here; it is the ceiling the kernels are held against.
- `correctness`: `triton_ops.lookup` / `lookup_update` on CUDA against
  `reference.lookup` / `lookup_update` on the CPU, over pooling (sum, mean), per-id weights,
  every sparse optimizer (SGD, Adagrad, row-wise Adagrad, Adam, AdamW, partial row-wise Adam;
  the update arguments an `OptimizerArgs` at step 3, every hyperparameter non-trivial), the
  optimizer states too, float32 and bfloat16 tables, empty bags and duplicate ids; plus a bad
  id, which must raise a ValueError naming the table and leave it unchanged.
- `kernels`: interleaved timings (CUDA events, medians) of the Triton forward and
  forward + backward + SGD against `nn.EmbeddingBag` (sparse gradients + `torch.optim.SGD`) on
  the same tables and ids, for the CPU benchmark's cases and a large uniform case. `fwd` and
  `step` include the id validation every call does; `fwd_kernel` times the forward kernel
  launches alone, which the bandwidth floor applies to: the bytes the forward must move (rows
  gathered, ids, offsets, pooled output) divided by the copy bandwidth. The check passes when
  the kernel reaches `FLOOR_FRACTION` of the copy bandwidth on the uniform case.
- `training`: `parity.check_parity` with the compiled side on CUDA (Triton kernels in the plan
  module) and an NCCL process group of one rank, for the default pipeline and each of the four
  optimizations: outputs, tables and dense grads after several steps.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence

__all__ = ["main", "run", "FLOOR_FRACTION"]

# The forward kernel must reach this share of the copy bandwidth on uniform ids (a gather of
# whole rows: the copy bandwidth is its ceiling, latency and partial sectors keep it below).
FLOOR_FRACTION = 0.30

TRAINING_PIPELINES = (
    "",
    "aggregate-comm",
    "parallelize-tables{groups=2},generate-kernels",
    "hide-latency",
    "aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency",
)


def _section(name: str, fn: Callable[[], dict], log) -> dict:
    t0 = time.perf_counter()
    try:
        out = fn()
        out["ok"] = bool(out.get("ok", True))
    except Exception as e:  # one failing section must not hide the others' results
        out = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    log(
        f"[{name}] {'ok' if out['ok'] else 'FAILED'} in {out['seconds']} s"
        + ("" if out["ok"] else f": {out.get('error', '')}")
    )
    return out


def _events_ms(torch, fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def copy_bandwidth(torch, device: str, mib: int = 2048, repeats: int = 10) -> dict:
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ms = statistics.median(_events_ms(torch, lambda: dst.copy_(src)) for _ in range(repeats))
    moved = 2 * src.numel() * 4
    return {"bytes_per_copy": moved, "ms": round(ms, 4), "gb_per_s": round(moved / ms / 1e6, 1)}


# ---- correctness ------------------------------------------------------------------------------

CORRECTNESS_CASES = (
    # (name, rows, dim, batch, pooling, weighted, optimizer, dtype): every optimizer of
    # `sparselift.optim_rules`, over poolings, per-id weights, dims and both storage dtypes
    ("sum-sgd-d64", 5000, 64, 256, "sum", False, "sgd", "float32"),
    ("mean-sgd-d13", 300, 13, 128, "mean", False, "sgd", "float32"),
    ("weighted-sum-adagrad-d16", 200, 16, 256, "sum", True, "adagrad", "float32"),
    ("weighted-sum-rwadagrad-d16", 200, 16, 256, "sum", True, "rowwise_adagrad", "float32"),
    ("weighted-mean-rwadagrad-d128", 1000, 128, 64, "mean", True, "rowwise_adagrad", "float32"),
    ("sum-adam-d64", 2000, 64, 128, "sum", False, "adam", "float32"),
    ("weighted-mean-adamw-d24", 300, 24, 128, "mean", True, "adamw", "float32"),
    ("sum-prwadam-d128", 1000, 128, 64, "sum", False, "partial_rowwise_adam", "float32"),
    ("bf16-sum-sgd-d32", 500, 32, 128, "sum", False, "sgd", "bfloat16"),
    ("bf16-mean-adam-d32", 500, 32, 128, "mean", False, "adam", "bfloat16"),
)


def optimizer_args(kind: str, step: int = 3):
    """Update arguments of `kind` with every hyperparameter non-trivial, at step `step` (the
    Adam family's bias corrections away from 1)."""
    from sparselift.kernel_args import OptimizerArgs

    b1, b2 = 0.9, 0.999
    return OptimizerArgs(
        kind, lr=0.1, eps=1e-3, beta1=b1, beta2=b2, weight_decay=0.01, bc1=1 - b1**step, bc2=1 - b2**step
    )


def optimizer_state(torch, kind: str, rows: int, dim: int, g):
    """A random non-negative state of the rule's layout: `[rows, W]`, `[rows]` when W is 1, None
    for an optimizer without state (SGD)."""
    from sparselift.optim_rules import rule_for

    width = rule_for(kind).state_width(dim)
    if width == 0:
        return None
    return torch.rand(rows * width, generator=g)  # the rule's states whole, one after the other


def _max_err(a, b) -> float:
    return 0.0 if a is None and b is None else float((a.float().cpu() - b.float()).abs().max())


def _correctness_case(torch, device: str, seed: int, case: tuple) -> dict:
    """One case: `triton_ops` on `device` against `reference` on the CPU, forward and one update."""
    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs, UpdateArgs, check_bags
    from sparselift.runtime import reference as ref

    name, rows, dim, batch, pooling, weighted, kind, dtype = case
    features, segments, slots = 3, 2, [2, 0]
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 30, (segments * features * batch,), generator=g, dtype=torch.int32)
    lengths[::5] = 0  # empty bags
    n = int(lengths.sum())
    idx = torch.randint(0, max(rows // 4, 1), (n,), generator=g)  # a quarter of the rows: many duplicates
    w = torch.rand(n, generator=g) + 0.5 if weighted else None
    table = (torch.randn(rows, dim, generator=g) * 0.1).to(getattr(torch, dtype))
    grad = torch.randn(segments * batch, dim * len(slots), generator=g)
    state = optimizer_state(torch, kind, rows, dim, g)
    update = UpdateArgs(optimizer_args(kind), grad_scale=0.5)

    def on(t):
        return None if t is None else t.to(device)

    bags = RoutedBags(lengths, idx, w, features, batch)
    dev_bags = RoutedBags(on(lengths), on(idx), on(w), features, batch)
    (out,) = tk.lookup(dev_bags, [TableArgs(name, on(table), slots, pooling)])
    ref_table = TableArgs(name, table.float(), slots, pooling)
    want = ref.lookup(check_bags(bags, [ref_table]), ref_table)
    t_dev, s_dev = on(table.clone()), on(None if state is None else state.clone())
    t_ref, s_ref = table.float().clone(), None if state is None else state.clone()
    tk.lookup_update(dev_bags, [TableArgs(name, t_dev, slots, pooling, s_dev)], [on(grad)], update)
    ref_table = TableArgs(name, t_ref, slots, pooling, s_ref)
    ref.lookup_update(check_bags(bags, [ref_table], "update"), ref_table, grad, update)
    tol = 2e-2 if dtype == "bfloat16" else 1e-4
    # The optimizer state grows with the summed squares (Adagrad's reaches ~1e3 here, where one
    # f32 step is 6e-5): its error is relative to its magnitude, the others absolute.
    scale = 1.0 if s_ref is None else max(1.0, float(s_ref.abs().max()))
    errs = {"fwd": _max_err(out, want), "update": _max_err(t_dev, t_ref), "state": _max_err(s_dev, s_ref) / scale}
    return {
        "case": name,
        "optimizer": kind,
        "ids": n,
        "duplicates": n - int(idx.unique().numel()),
        "tolerance": tol,
        **errs,
        "ok": all(v <= tol for v in errs.values()),
    }


def _bad_id(torch, device: str) -> dict:
    """A bad id: a clear error naming the table, the table untouched."""
    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs
    from sparselift.optim_rules import OptimizerKind

    t = torch.randn(3, 4, device=device)
    before = t.clone()
    try:
        tk.lookup_update(
            RoutedBags(
                torch.tensor([2, 1], dtype=torch.int32, device=device),
                torch.tensor([0, 5, 1], device=device),
                None,
                1,
                2,
            ),
            [TableArgs("t_items", t, [0], "sum")],
            [torch.randn(2, 4, device=device)],
            UpdateArgs(OptimizerArgs(OptimizerKind.SGD, lr=0.1)),
        )
        message = "no error"
    except ValueError as e:
        message = str(e)
    bad = {"message": message, "unchanged": bool(torch.equal(t, before))}
    bad["ok"] = "t_items" in message and "out of range" in message and bad["unchanged"]
    return bad


def correctness(torch, device: str) -> dict:
    cases = [_correctness_case(torch, device, seed, case) for seed, case in enumerate(CORRECTNESS_CASES)]
    bad = _bad_id(torch, device)
    return {"cases": cases, "bad_id": bad, "ok": all(c["ok"] for c in cases) and bad["ok"]}


# ---- kernel timings ---------------------------------------------------------------------------


def _cases(quick: bool):
    from sparselift.bench.kernels import CASES, Case

    big = Case("8x1M x128 uniform", (1_000_000,) * 8, 128, 16384, (1, 63))
    cases = [CASES["4x100k x64"], CASES["kaggle-onehot"], CASES["dlrm-bench"], big]
    return cases[:1] + cases[-1:] if quick else cases


def _inputs(torch, case, device: str, uniform: bool) -> dict:
    from sparselift.bench.kernels import make_inputs

    data = make_inputs(case)
    if uniform:  # the floor case: no hot rows held in L2
        g = torch.Generator().manual_seed(1)
        data["ids"] = torch.cat([torch.randint(0, r, (n,), generator=g) for r, n in zip(case.rows, data["per_table"])])
    for key in ("lengths", "ids"):
        data[key] = data[key].to(device)
    for key in ("tables", "grads"):
        data[key] = [t.to(device) for t in data[key]]
    return data


def _embbag_fns(torch, case, data: dict, lr: float):
    """torch's forward and step: one `nn.EmbeddingBag(sparse=True)` per table over its slice of
    ids, sparse gradients, `torch.optim.SGD`."""
    from torch import nn

    t, b, dim, device = len(case.rows), case.bags, case.dim, data["ids"].device
    bags = [nn.EmbeddingBag(r, dim, mode="sum", sparse=True).to(device) for r in case.rows]
    with torch.no_grad():
        for e, w in zip(bags, data["tables"]):
            e.weight.copy_(w)
    opt = torch.optim.SGD([e.weight for e in bags], lr=lr)
    id_slices = list(torch.split(data["ids"], data["per_table"]))
    off_slices = [
        torch.cat([torch.zeros(1, dtype=torch.int64, device=device), ln.to(torch.int64).cumsum(0)[:-1]])
        for ln in data["lengths"].view(t, b)
    ]

    def torch_fwd():
        return [e(i, o) for e, i, o in zip(bags, id_slices, off_slices)]

    def torch_step():
        torch.autograd.backward(torch_fwd(), data["grads"])
        opt.step()
        opt.zero_grad(set_to_none=True)

    return torch_fwd, torch_step


def _interleaved_medians(torch, systems: dict, repeats: int, warmup: int = 2) -> dict:
    """Median CUDA-event ms of each system's metrics, timed interleaved (per repeat and metric,
    every system once), after `warmup` untimed repeats."""
    samples = {s: {m: [] for m in fns} for s, fns in systems.items()}
    for rep in range(repeats + warmup):
        for metric in ("fwd", "fwd_kernel", "step"):
            for s, fns in systems.items():
                if metric in fns:
                    ms = _events_ms(torch, fns[metric])
                    if rep >= warmup:
                        samples[s][metric].append(ms)
    return {s: {m: round(statistics.median(v), 4) for m, v in d.items()} for s, d in samples.items()}


def time_case(torch, case, device: str, repeats: int, uniform: bool) -> dict:
    from sparselift.codegen import triton_kernels
    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs, check_bags, check_ids
    from sparselift.optim_rules import OptimizerKind

    data = _inputs(torch, case, device, uniform)
    t, b, dim = len(case.rows), case.bags, case.dim
    bags = RoutedBags(data["lengths"], data["ids"], None, t, b)
    tables = [TableArgs(f"t{k}", w.clone(), [k], "sum") for k, w in enumerate(data["tables"])]
    grads = data["grads"]
    lr = 0.01
    sgd = UpdateArgs(OptimizerArgs(OptimizerKind.SGD, lr=lr))

    def fwd():
        return tk.lookup(bags, tables)

    def step():
        fwd()
        tk.lookup_update(bags, tables, grads, sgd)

    # the forward kernel alone, on bags checked (and offsets computed) once
    checked = check_bags(bags, tables)
    offsets = check_ids(checked, tables).offsets
    outs = [torch.zeros(b, dim, device=device) for _ in range(t)]
    slot_tensors = [torch.tensor([k], dtype=torch.int32, device=device) for k in range(t)]

    def fwd_kernel():
        for k in range(t):
            triton_kernels.lookup_kernel[(b,)](
                tables[k].weight,
                checked.indices,
                offsets,
                offsets,
                slot_tensors[k],
                outs[k],
                t,
                b,
                1,
                dim,
                HAS_W=False,
                MEAN=False,
                BLOCK_L=16,
                BLOCK_D=tk._next_pow2(dim),
            )

    torch_fwd, torch_step = _embbag_fns(torch, case, data, lr)

    # agreement before timing: Triton forward vs EmbeddingBag forward on the same weights
    with torch.no_grad():
        diff = max(float((a - c).abs().max()) for a, c in zip(fwd(), torch_fwd()))
    systems = {
        "triton": {"fwd": fwd, "fwd_kernel": fwd_kernel, "step": step},
        "torch-embbag": {"fwd": torch_fwd, "step": torch_step},
    }
    ms = _interleaved_medians(torch, systems, repeats)
    n_ids = checked.indices.numel()
    fwd_bytes = n_ids * dim * 4 + n_ids * 8 + (t * b + 1) * 8 + t * b * dim * 4
    return {
        "name": case.name,
        "uniform_ids": uniform,
        "tables": t,
        "rows": case.rows[0],
        "dim": dim,
        "bags": b,
        "ids": n_ids,
        "fwd_bytes": fwd_bytes,
        "ms": ms,
        "max_abs_diff_fwd_vs_embbag": diff,
        "fwd_kernel_gb_per_s": round(fwd_bytes / ms["triton"]["fwd_kernel"] / 1e6, 1),
        "speedup_vs_embbag_fwd": round(ms["torch-embbag"]["fwd"] / ms["triton"]["fwd"], 3),
        "speedup_vs_embbag_step": round(ms["torch-embbag"]["step"] / ms["triton"]["step"], 3),
    }


def kernels(torch, device: str, copy_gb_per_s: float, quick: bool, repeats: int) -> dict:
    results = []
    for case in _cases(quick):
        uniform = "uniform" in case.name
        r = time_case(torch, case, device, repeats, uniform)
        r["fwd_kernel_share_of_copy_bw"] = round(r["fwd_kernel_gb_per_s"] / copy_gb_per_s, 3) if copy_gb_per_s else None
        results.append(r)
        torch.cuda.empty_cache()
    floor = [r for r in results if r["uniform_ids"]]
    ok = all(
        (r["fwd_kernel_share_of_copy_bw"] or 0) >= FLOOR_FRACTION and r["max_abs_diff_fwd_vs_embbag"] < 1e-3
        for r in floor
    ) and all(r["max_abs_diff_fwd_vs_embbag"] < 1e-3 for r in results)
    return {"cases": results, "floor_fraction": FLOOR_FRACTION, "ok": ok}


# ---- compiled training ------------------------------------------------------------------------


def training(device: str, steps: int) -> dict:
    from sparselift.runtime.parity import check_parity

    runs = []
    for passes in TRAINING_PIPELINES:
        t0 = time.perf_counter()
        try:
            check_parity(
                "dlrm-kaggle",
                1,
                steps=steps,
                batch=64,
                rows_cap=500,
                atol=1e-4,
                passes=passes,
                device=device,
                backend="nccl",
            )
            runs.append({"passes": passes or "(default)", "ok": True})
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"  # the failing rank's traceback ends the message: keep its end
            runs.append({"passes": passes or "(default)", "ok": False, "error": msg[:300] + " ... " + msg[-2500:]})
        runs[-1]["seconds"] = round(time.perf_counter() - t0, 1)
    return {
        "model": "dlrm-kaggle",
        "world_size": 1,
        "backend": "nccl",
        "steps": steps,
        "runs": runs,
        "ok": all(r["ok"] for r in runs),
    }


# ---- driver -----------------------------------------------------------------------------------


def machine_info(torch) -> dict:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(
            gpu=p.name,
            sms=p.multi_processor_count,
            memory_gib=round(p.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    return info


def run(
    quick: bool = False,
    repeats: int = 10,
    steps: int = 4,
    sections: Sequence[str] = ("copy", "correctness", "kernels", "training"),
    log=print,
) -> dict:
    import torch

    device = "cuda"
    doc: dict = {"machine": machine_info(torch)}
    log(f"GPU check on {doc['machine'].get('gpu')} (torch {torch.__version__}, triton {doc['machine']['triton']})")
    copy_gb = 0.0
    if "copy" in sections:
        doc["copy"] = _section("copy", lambda: copy_bandwidth(torch, device), log)
        copy_gb = doc["copy"].get("gb_per_s", 0.0)
    if "correctness" in sections:
        doc["correctness"] = _section("correctness", lambda: correctness(torch, device), log)
    if "kernels" in sections:
        doc["kernels"] = _section("kernels", lambda: kernels(torch, device, copy_gb, quick, repeats), log)
    if "training" in sections:
        doc["training"] = _section("training", lambda: training(device, steps), log)
    doc["ok"] = all(doc[s]["ok"] for s in sections if s in doc)
    return doc


def format_report(doc: dict) -> str:
    lines = []
    if "copy" in doc and doc["copy"]["ok"]:
        lines.append(f"copy bandwidth: {doc['copy']['gb_per_s']} GB/s (read + write)")
    if doc.get("correctness", {}).get("cases"):
        lines += [
            "",
            "| case | optimizer | ids | fwd err | update err | state err | ok |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for c in doc["correctness"]["cases"]:
            kind = c.get("optimizer", "-")  # records before the optimizer field: in the case's name
            lines.append(
                f"| {c['case']} | {kind} | {c['ids']} | {c['fwd']:.2g} | {c['update']:.2g} | {c['state']:.2g} | "
                f"{'yes' if c['ok'] else 'NO'} |"
            )
        lines.append(f"bad id: {doc['correctness']['bad_id']}")
    if doc.get("kernels", {}).get("cases"):
        lines += [
            "",
            "| case | system | fwd ms | fwd kernel ms | fwd+bwd+SGD ms | kernel GB/s | share of copy |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in doc["kernels"]["cases"]:
            for s, m in r["ms"].items():
                extra = f"{r['fwd_kernel_gb_per_s']} | {r['fwd_kernel_share_of_copy_bw']}" if s == "triton" else "- | -"
                lines.append(
                    f"| {r['name']} | {s} | {m['fwd']:.3f} | {m.get('fwd_kernel', float('nan')):.3f} | "
                    f"{m['step']:.3f} | {extra} |"
                )
    if doc.get("training", {}).get("runs"):
        lines += ["", "| compiled training on CUDA (NCCL, 1 rank) | parity |", "|---|---|"]
        for r in doc["training"]["runs"]:
            lines.append(f"| {r['passes']} | {'yes' if r['ok'] else 'NO: ' + r.get('error', '')[:200]} |")
    for s in ("copy", "correctness", "kernels", "training"):
        if s in doc and not doc[s]["ok"] and "error" in doc[s]:
            lines.append(f"{s} FAILED: {doc[s]['error']}")
    lines.append(f"\noverall: {'ok' if doc.get('ok') else 'FAILED'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparselift bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="two kernel cases instead of four")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats per system and metric (default 10)")
    parser.add_argument("--steps", type=int, default=4, help="training steps per parity run (default 4)")
    parser.add_argument(
        "--sections",
        default="copy,correctness,kernels,training",
        help="comma-separated subset of copy, correctness, kernels, training",
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "sparselift bench gpu: no CUDA GPU here (torch.cuda.is_available() is False); "
            "the Triton kernels are checked on the CPU by tests/kernels/test_triton_interpret.py",
            file=sys.stderr,
        )
        return 2
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    doc = run(quick=args.quick, repeats=args.repeats, steps=args.steps, sections=sections)
    doc["command"] = "sparselift bench gpu " + " ".join(argv if argv is not None else sys.argv[1:])
    print(format_report(doc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.json}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
