"""`sparselift bench reference-ops`: what the reference lowering's per-table ops cost, for the
cost model's `reference_*` profile fields.

The reference lowering (`sparselift.runtime.reference`: per-table torch ops, the CPU path of a
plan without generated kernels) spends, besides the rows' gathers and updates that a generated
kernel also does, a fixed number of torch dispatches per op and several per-id passes (bag
geometry, masks, scaling, scatter). This times `reference.lookup` and `reference.lookup_update`
(SGD) on one thread over a range of id counts, subtracts what the profile already charges for
the rows' bytes (`cost_model.lookup` / `sparse_update` without the reference term), and fits
`time = op_us + ns_per_id x ids + ns_per_byte x bytes` by least squares (interleaved repeats,
medians). It prints the four fields (`reference_op_us`, `reference_lookup_ns`,
`reference_update_ns`, `reference_byte_ns`), which a JSON profile accepts, and the fit's median
relative residual.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np
import torch

from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs, check_bags
from sparselift.optim_rules import OptimizerKind
from sparselift.passes import cost_model
from sparselift.passes.profiles import load_profile
from sparselift.runtime import reference


@attrs.frozen
class Case:
    dim: int
    batch: int
    ids_per_bag: int
    rows: int = 100_000

    @property
    def ids(self) -> int:
        return 2 * self.batch * self.ids_per_bag  # two segments (ranks' batches), one feature


def _ops(case: Case, generator: torch.Generator) -> dict[str, Callable[[], None]]:
    table = TableArgs("t", torch.randn(case.rows, case.dim, generator=generator), (0,), "sum")
    lengths = torch.full((2 * case.batch,), case.ids_per_bag, dtype=torch.int32)
    ids = torch.randint(0, case.rows, (case.ids,), generator=generator)
    grad = torch.randn(2 * case.batch, case.dim, generator=generator)
    # Checked once, outside the timed ops: the reference lowering itself is what is measured.
    bags = check_bags(RoutedBags(lengths, ids, None, 1, case.batch), [table])
    sgd = UpdateArgs(OptimizerArgs(OptimizerKind.SGD, lr=0.0))  # lr 0: the table stays as it was

    def lookup() -> None:
        reference.lookup(bags, table)

    def update() -> None:
        reference.lookup_update(bags, table, grad, sgd)

    return {"lookup": lookup, "update": update}


def measure(cases: Sequence[Case], repeats: int, seed: int = 0) -> list[dict]:
    """Median microseconds of each case's lookup and update, repeats interleaved across cases."""
    generator = torch.Generator().manual_seed(seed)
    ops = [(case, _ops(case, generator)) for case in cases]
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(2):  # warm up every op
        for _, fns in ops:
            for fn in fns.values():
                fn()
    for _ in range(repeats):
        for i, (_, fns) in enumerate(ops):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times.setdefault((i, name), []).append((time.perf_counter() - start) * 1e6)
    return [
        {"op": name, "dim": case.dim, "ids": case.ids, "us": statistics.median(times[(i, name)])}
        for i, (case, fns) in enumerate(ops)
        for name in fns
    ]


FIELDS = ("reference_op_us", "reference_lookup_ns", "reference_update_ns", "reference_byte_ns")


def fit(rows: Sequence[dict], profile_name: str = "cpu-gloo") -> dict:
    """The profile's `reference_*` fields from measured ops: each op's time minus what the profile
    charges without the reference term, fitted in relative error as `op_us + ns_per_id x ids +
    ns_per_byte x gathered bytes` (per-id terms per kind; the op and byte terms shared)."""
    p = attrs.evolve(load_profile(profile_name), **dict.fromkeys(FIELDS, 0.0))
    a, y, took = [], [], []
    for r in rows:
        nbytes, is_lookup = r["ids"] * r["dim"] * 4, r["op"] == "lookup"
        charged = (cost_model.lookup if is_lookup else cost_model.sparse_update)(p, nbytes, r["ids"]).total
        a.append([1.0, r["ids"] * is_lookup / 1e3, r["ids"] * (not is_lookup) / 1e3, nbytes / 1e3])
        y.append(r["us"] - charged)
        took.append(max(r["us"], 1.0))
    am, ym, weight = np.array(a), np.array(y), 1.0 / np.array(took)
    x = np.maximum(np.linalg.lstsq(am * weight[:, None], ym * weight, rcond=None)[0], 0.0)
    rel = np.abs(am @ x - ym) / np.array(took)
    return {
        **{f: round(float(v), 3) for f, v in zip(FIELDS, x)},
        "median_rel_residual": round(float(np.median(rel)), 4),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sparselift bench reference-ops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="fewer cases and repeats (a smoke run)")
    ap.add_argument("--json", help="write the measurements and the fitted fields")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    batches = (256, 2048) if args.quick else (256, 1024, 4096, 16384)
    cases = [Case(dim, b, k) for dim in (16, 64) for b in batches for k in (1, 20) if b * k <= 100_000]
    rows = measure(cases, 3 if args.quick else args.repeats)
    print(f"{'op':<8}{'dim':>5}{'ids':>10}{'us':>12}")
    for r in rows:
        print(f"{r['op']:<8}{r['dim']:>5}{r['ids']:>10}{r['us']:>12.1f}")
    fields = fit(rows)
    print(json.dumps(fields))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "fit": fields, "torch_threads": 1}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
