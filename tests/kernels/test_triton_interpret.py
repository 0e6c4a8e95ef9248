"""Triton kernels (sparselift.codegen.triton_ops / triton_kernels) against the reference lowering.

Triton decides between compiling and interpreting when `@triton.jit` decorates a kernel, from
`TRITON_INTERPRET` as it is *then*. To keep that setting out of the pytest process (other tests
may import triton), the interpreter checks run in one subprocess: this file run as a script with
`TRITON_INTERPRET=1` set before anything imports triton. It checks every case on CPU tensors at
small sizes (a few tables, dims 4-16, batch 4-8, many duplicate ids): every optimizer of
`sparselift.optim_rules` (update kernels generated from its rule) on every pooling / weighting /
dtype shape, tables and optimizer states against `reference.lookup_update`, several tables in
one call, the `TritonKernels` backend against `ReferenceKernels` through the backend protocol,
and the errors a bad id or a bad state raises (the shared `kernel_args` checks); it prints one
JSON line per case, and the tests below assert on those lines. The CUDA test runs the compiled
kernels and is skipped without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":  # the interpreter worker: set the variable before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import pytest

KINDS = ["sgd", "adagrad", "rowwise_adagrad", "adam", "adamw", "partial_rowwise_adam"]
SHAPES = [
    # (name, dim, batch, pooling, weighted, dtype)
    ("sum-d4", 4, 4, "sum", False, "float32"),
    ("mean-d13", 13, 8, "mean", False, "float32"),
    ("weighted-sum-d16", 16, 4, "sum", True, "float32"),
    ("weighted-mean-d8", 8, 6, "mean", True, "float32"),
    ("bf16-sum-d8", 8, 4, "sum", False, "bfloat16"),
]
# (name, dim, batch, pooling, weighted, optimizer, dtype): every optimizer on every shape
CASES = [(f"{shape}-{kind}", dim, b, p, wt, kind, dt) for kind in KINDS for shape, dim, b, p, wt, dt in SHAPES]
FUSED_KINDS = ["sgd", "adam"]
SHARED_KINDS = ["rowwise_adagrad", "partial_rowwise_adam"]
BACKEND_KINDS = ["sgd", "rowwise_adagrad", "adam"]


def _args(kind: str, step: int = 3):
    """Update arguments with every hyperparameter non-trivial, at step `step`."""
    from sparselift.kernel_args import OptimizerArgs

    b1, b2 = 0.9, 0.999
    return OptimizerArgs(
        kind, lr=0.1, eps=1e-3, beta1=b1, beta2=b2, weight_decay=0.01, bc1=1 - b1**step, bc2=1 - b2**step
    )


def _state(kind: str, rows: int, dim: int, g):
    """A random non-negative state buffer of the rule's layout (`rows * W` floats)."""
    import torch

    from sparselift.optim_rules import rule_for

    width = rule_for(kind).state_width(dim)
    if width == 0:
        return None
    return torch.rand(rows * width, generator=g)


def _err(a, b) -> float:
    if a is None and b is None:
        return 0.0
    return float((a.float() - b.float()).abs().max())


def _emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def _ref_lookup(bags, table):
    """`reference.lookup` of one table (its bags checked as every backend checks them)."""
    from sparselift.kernel_args import check_bags
    from sparselift.runtime import reference as ref

    return ref.lookup(check_bags(bags, [table]), table)


def _ref_update(bags, table, grad, update) -> None:
    """`reference.lookup_update` of one table."""
    from sparselift.kernel_args import check_bags
    from sparselift.runtime import reference as ref

    ref.lookup_update(check_bags(bags, [table], "update"), table, grad, update)


def _single_table_cases() -> None:
    import torch

    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs, UpdateArgs

    segments, features = 2, 3
    slots = [2, 0]
    for seed, (name, dim, batch, pooling, weighted, kind, dtype) in enumerate(CASES):
        g = torch.Generator().manual_seed(seed)
        dt = getattr(torch, dtype)
        rows = 5
        lengths = torch.randint(0, 6, (segments * features * batch,), generator=g, dtype=torch.int32)
        lengths[::3] = 0
        n = int(lengths.sum())
        idx = torch.randint(0, rows, (n,), generator=g)
        w = torch.rand(n, generator=g) + 0.5 if weighted else None
        table = torch.randn(rows, dim, generator=g).to(dt)
        bags = RoutedBags(lengths, idx, w, features, batch)
        (out,) = tk.lookup(bags, [TableArgs("t", table, slots, pooling)])
        want = _ref_lookup(bags, TableArgs("t", table.float(), slots, pooling))
        grad = torch.randn(segments * batch, dim * len(slots), generator=g)
        state = _state(kind, rows, dim, g)
        t1, t2 = table.clone(), table.clone()
        s1, s2 = (None, None) if state is None else (state.clone(), state.clone())
        update = UpdateArgs(_args(kind), grad_scale=0.5)
        tk.lookup_update(bags, [TableArgs("t", t1, slots, pooling, s1)], [grad], update)
        _ref_update(bags, TableArgs("t", t2, slots, pooling, s2), grad, update)
        _emit(
            case=name,
            fwd=_err(out, want),
            upd=_err(t1, t2),
            state=_err(s1, s2),
            changed=bool((t1.float() != table.float()).any()),
            state_changed=state is None or bool((s1 != state).any()),
            dups=n - int(idx.unique().numel()),
        )


def _multi_table_cases() -> None:
    import torch

    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs, UpdateArgs

    for kind in FUSED_KINDS:  # one call per op over tables of different dims
        g = torch.Generator().manual_seed(7)
        weights = [torch.randn(4, 4, generator=g), torch.randn(6, 16, generator=g)]
        lengths = torch.randint(0, 4, (1 * 2 * 4,), generator=g, dtype=torch.int32)
        n = int(lengths.sum())
        idx = torch.randint(0, 4, (n,), generator=g)
        bags = RoutedBags(lengths, idx, None, 2, 4)
        poolings = ["sum", "mean"]
        outs = tk.lookup(bags, [TableArgs(f"t{k}", t, [k], p) for k, (t, p) in enumerate(zip(weights, poolings))])
        fwd = [
            _err(o, _ref_lookup(bags, TableArgs(f"t{k}", t, [k], p)))
            for k, (o, t, p) in enumerate(zip(outs, weights, poolings))
        ]
        grads = [torch.randn(4, 4, generator=g), torch.randn(4, 16, generator=g)]
        states = [_state(kind, 4, 4, g), _state(kind, 6, 16, g)]
        mine = [t.clone() for t in weights]
        my_states = [None if s is None else s.clone() for s in states]
        update = UpdateArgs(_args(kind))
        tables = [TableArgs(f"t{k}", t, [k], p, s) for k, (t, p, s) in enumerate(zip(mine, poolings, my_states))]
        tk.lookup_update(bags, tables, grads, update)
        for k, (t, st, gr, p) in enumerate(zip(weights, states, grads, poolings)):
            _ref_update(bags, TableArgs(f"t{k}", t, [k], p, st), gr, update)
        upd = [_err(a, b) for a, b in zip(mine + my_states, weights + states)]
        _emit(case=f"fused-{kind}", fwd=max(fwd), upd=max(upd))
    for kind in SHARED_KINDS:  # two tables reading the same slot (one update per table)
        g = torch.Generator().manual_seed(11)
        weights = [torch.randn(5, 8, generator=g), torch.randn(7, 8, generator=g)]
        grads = [torch.randn(4, 8, generator=g), torch.randn(4, 16, generator=g)]
        states = [_state(kind, 5, 8, g), _state(kind, 7, 8, g)]
        lengths = torch.randint(0, 4, (2 * 4,), generator=g, dtype=torch.int32)
        idx = torch.randint(0, 5, (int(lengths.sum()),), generator=g)
        bags = RoutedBags(lengths, idx, None, 2, 4)
        mine, my_states = [t.clone() for t in weights], [st.clone() for st in states]
        update = UpdateArgs(_args(kind))
        slots = [[0], [1, 0]]
        tables = [TableArgs(f"t{k}", t, sl, "sum", st) for k, (t, sl, st) in enumerate(zip(mine, slots, my_states))]
        tk.lookup_update(bags, tables, grads, update)
        for k, (t, st, gr, sl) in enumerate(zip(weights, states, grads, slots)):
            _ref_update(bags, TableArgs(f"t{k}", t, sl, "sum", st), gr, update)
        _emit(case=f"shared-slot-{kind}", upd=max(_err(a, b) for a, b in zip(mine + my_states, weights + states)))
    bags = RoutedBags(torch.tensor([2, 1], dtype=torch.int32), torch.tensor([0, 2, 1]), None, 1, 2)
    try:  # no tables: nothing to pool or update (as the reference)
        outs = tk.lookup(bags, [])
        tk.lookup_update(bags, [], [], UpdateArgs(_args("adam")))
        message = f"{len(outs)} outputs"
    except Exception as e:
        message = f"{type(e).__name__}: {e}"
    _emit(case="no-tables", message=message)


def _backend_cases() -> None:
    """`runtime.backends.TritonKernels` through the backend protocol (the Triton kernels on CPU
    tensors under the interpreter: checked to be called, not the reference fallback) against
    `ReferenceKernels`: two tables of different dims and poolings over weighted bags, the
    lookup into caller-given column blocks of one buffer and without, then one update."""
    from sparselift.codegen import triton_ops
    from sparselift.kernel_args import TableArgs

    slots, poolings = [[2, 0], [1]], ["mean", "sum"]

    def tables_of(ws, sts):
        return [TableArgs(f"t{k}", *a) for k, a in enumerate(zip(ws, slots, poolings, sts))]

    calls = {"lookup": 0, "lookup_update": 0}
    real = {op: getattr(triton_ops, op) for op in calls}

    def counted(op):
        def call(*args, **kwargs):
            calls[op] += 1
            return real[op](*args, **kwargs)

        return call

    for op in calls:  # the backend looks the wrappers up on the module at each call
        setattr(triton_ops, op, counted(op))
    try:
        _backend_kinds(tables_of, calls)
    finally:
        for op, fn in real.items():
            setattr(triton_ops, op, fn)


def _backend_kinds(tables_of, calls: dict) -> None:
    import torch

    from sparselift.kernel_args import RoutedBags, UpdateArgs
    from sparselift.runtime.backends import ReferenceKernels, TritonKernels

    for kind in BACKEND_KINDS:
        g = torch.Generator().manual_seed(13)
        segments, features, batch = 2, 3, 4
        lengths = torch.randint(0, 5, (segments * features * batch,), generator=g, dtype=torch.int32)
        lengths[::4] = 0
        n = int(lengths.sum())
        idx = torch.randint(0, 5, (n,), generator=g)
        w = torch.rand(n, generator=g) + 0.5
        bags = RoutedBags(lengths, idx, w, features, batch)
        weights = [torch.randn(5, 8, generator=g), torch.randn(6, 4, generator=g)]
        states = [_state(kind, 5, 8, g), _state(kind, 6, 4, g)]
        tri, ref = TritonKernels(), ReferenceKernels()
        got = tri.lookup(bags, tables_of(weights, states))
        want = ref.lookup(bags, tables_of(weights, states))
        rows = segments * batch
        buffer = torch.full((rows, 16 + 4), float("nan"))
        blocks = [buffer[:, :16], buffer[:, 16:]]
        into = tri.lookup(bags, tables_of(weights, states), out=blocks)
        grads = [torch.randn(rows, 16, generator=g), torch.randn(rows, 4, generator=g)]
        update = UpdateArgs(_args(kind), grad_scale=0.5)
        mine = [t.clone() for t in weights], [None if s is None else s.clone() for s in states]
        theirs = [t.clone() for t in weights], [None if s is None else s.clone() for s in states]
        tri.lookup_update(bags, tables_of(*mine), grads, update)
        ref.lookup_update(bags, tables_of(*theirs), grads, update)
        _emit(
            case=f"backend-{kind}",
            fwd=max(_err(a, b) for a, b in zip(got, want)),
            fwd_out=max(_err(a, b) for a, b in zip(into, want)),
            out_is_given=all(a is b for a, b in zip(into, blocks)),
            upd=max(_err(a, b) for a, b in zip(mine[0] + mine[1], theirs[0] + theirs[1])),
            changed=all(bool((a != b).any()) for a, b in zip(mine[0], weights)),
            triton_calls=dict(calls),
        )
        calls.update(lookup=0, lookup_update=0)


def _error_cases() -> None:
    import torch

    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs, UpdateArgs

    lengths = torch.tensor([2, 1], dtype=torch.int32)
    # (case, optimizer, ids, state of the [3, 4] table)
    cases = [
        ("bad-id", "sgd", [0, 5, 1], None),
        ("bad-state-adam", "adam", [0, 2, 1], torch.zeros(12)),  # needs 3 * 8 floats
        ("bad-state-rowwise", "rowwise_adagrad", [0, 2, 1], torch.zeros(6)),  # needs 3 floats
        ("missing-state", "adagrad", [0, 2, 1], None),
        ("bad-state-dtype", "adagrad", [0, 2, 1], torch.zeros(12, dtype=torch.float64)),
    ]
    for case, kind, ids, state in cases:
        t = torch.randn(3, 4)
        before = t.clone()
        try:
            tk.lookup_update(
                RoutedBags(lengths, torch.tensor(ids), None, 1, 2),
                [TableArgs("t_items", t, [0], "sum", state)],
                [torch.randn(2, 4)],
                UpdateArgs(_args(kind)),
            )
            message = "no error"
        except ValueError as e:
            message = str(e)
        _emit(case=case, message=message, unchanged=bool(torch.equal(t, before)))


def _worker() -> int:
    from sparselift.codegen import triton_ops as tk

    assert tk.INTERPRETED, "TRITON_INTERPRET was not seen when the kernels were decorated"
    _single_table_cases()
    _multi_table_cases()
    _backend_cases()
    _error_cases()
    return 0


if __name__ == "__main__":
    sys.exit(_worker())


triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict[str, dict]:
    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        SPARSELIFT_CACHE_DIR=str(tmp_path_factory.mktemp("cache")),  # the generated update kernels
    )
    r = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=480, env=env, cwd=ROOT)
    results = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            results[d["case"]] = d
    if r.returncode != 0 and "not seen" in r.stderr:
        pytest.skip("this triton build does not honour TRITON_INTERPRET")
    assert r.returncode == 0, r.stderr[-4000:]
    return results


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_interpreted_kernels_match_reference(interpreted, case):
    """Every optimizer, every pooling / weighting, repeated ids: table and state as the reference's."""
    d = interpreted[case]
    low = case.startswith("bf16")  # the interpreter truncates f32 -> bf16 (the reference rounds)
    assert d["fwd"] <= (5e-2 if low else 1e-5), d
    assert d["upd"] <= (5e-2 if low else 1e-5), d
    assert d["state"] <= 1e-5, d
    assert d["changed"] and d["state_changed"] and d["dups"] > 0, d


@pytest.mark.parametrize("kind", FUSED_KINDS)
def test_interpreted_fused_multi_table(interpreted, kind):
    d = interpreted[f"fused-{kind}"]
    assert d["fwd"] <= 1e-5 and d["upd"] <= 1e-5, d


@pytest.mark.parametrize("kind", SHARED_KINDS)
def test_interpreted_tables_sharing_a_slot(interpreted, kind):
    assert interpreted[f"shared-slot-{kind}"]["upd"] <= 1e-5


def test_interpreted_call_without_tables_does_nothing(interpreted):
    assert interpreted["no-tables"]["message"] == "0 outputs"


@pytest.mark.parametrize("kind", BACKEND_KINDS)
def test_interpreted_triton_backend_matches_reference_backend(interpreted, kind):
    """`TritonKernels` through the backend protocol runs the Triton kernels (no fallback) and
    gives `ReferenceKernels`' pooled outputs (returned, or written into the given buffers) and
    updated tables and states."""
    d = interpreted[f"backend-{kind}"]
    assert d["triton_calls"] == {"lookup": 2, "lookup_update": 1}, d
    assert d["fwd"] <= 1e-5 and d["fwd_out"] <= 1e-5 and d["out_is_given"], d
    assert d["upd"] <= 1e-5 and d["changed"], d


def test_interpreted_bad_id_names_table(interpreted):
    d = interpreted["bad-id"]
    assert d["message"] == ("update of table 't_items': id 5 at position 1 is out of range for a table of 3 rows"), d
    assert d["unchanged"]


@pytest.mark.parametrize(
    "case, kind, width",
    [
        ("bad-state-adam", "adam", 8),
        ("bad-state-rowwise", "rowwise_adagrad", 1),
        ("missing-state", "adagrad", 4),
        ("bad-state-dtype", "adagrad", 4),
    ],
)
def test_interpreted_bad_state_names_table(interpreted, case, kind, width):
    d = interpreted[case]
    assert d["message"].startswith(
        f"update of table 't_items': {kind} needs a contiguous float32 state of 3 x {width} entries; got "
    ), d
    assert d["unchanged"]


@pytest.mark.parametrize("kind", KINDS)
def test_update_source_is_rendered_from_the_rule(kind):
    """The generated kernel module is valid Python holding the rule's statements (no triton needed)."""
    from sparselift.codegen import triton_kernels
    from sparselift.optim_rules import rule_for

    source = triton_kernels.update_source(kind)
    compile(source, f"<{kind}>", "exec")
    rule = rule_for(kind)
    for name in triton_kernels.update_arguments(kind):
        assert f"hp_{name}," in source
    for s in rule.states:
        assert f"v_{s.name} = tl.load(" in source
    assert ("mean_g2 = tl.sum(g * g" in source) == ("mean_g2" in rule.names_read())
    assert ("tl.sqrt_rn(" in source) == any("sqrt(" in e for _, e in (*rule.row, *rule.element))


def test_triton_ops_imports_without_torch():
    """Module import needs neither torch nor sparselift.runtime (torch is imported by the wrappers)."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import sparselift.codegen.triton_ops as tk\n"
        "assert not any(m.startswith('sparselift.runtime') for m in sys.modules), 'runtime imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]


def test_module_imports_without_interpreter_or_gpu():
    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs

    assert tk.AVAILABLE
    import torch

    if not torch.cuda.is_available() and not tk.INTERPRETED:
        assert not tk.usable_for(torch.zeros(1))
        bags = RoutedBags(torch.zeros(2, dtype=torch.int32), torch.zeros(0, dtype=torch.int64), None, 1, 2)
        with pytest.raises(RuntimeError, match="CUDA"):
            tk.lookup(bags, [TableArgs("t", torch.zeros(2, 4), [0], "sum")])


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU")
def test_cuda_kernels_match_reference():
    import torch

    from sparselift.codegen import triton_ops as tk
    from sparselift.kernel_args import RoutedBags, TableArgs, UpdateArgs

    if tk.INTERPRETED:
        pytest.skip("kernels were decorated in interpreter mode")
    g = torch.Generator().manual_seed(0)
    features, batch, segments = 3, 64, 2
    table = torch.randn(50, 32, generator=g)
    lengths = torch.randint(0, 20, (segments * features * batch,), generator=g, dtype=torch.int32)
    n = int(lengths.sum())
    idx = torch.randint(0, 50, (n,), generator=g)
    w = torch.rand(n, generator=g)
    grad = torch.randn(segments * batch, 64, generator=g)
    cuda = lambda x: None if x is None else x.cuda()  # noqa: E731
    bags = RoutedBags(lengths, idx, w, features, batch)
    cuda_bags = RoutedBags(lengths.cuda(), idx.cuda(), w.cuda(), features, batch)
    for pooling in ("sum", "mean"):
        want = _ref_lookup(bags, TableArgs("t", table, [2, 0], pooling))
        (got,) = tk.lookup(cuda_bags, [TableArgs("t", table.cuda(), [2, 0], pooling)])
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
        for kind in KINDS:
            update = UpdateArgs(_args(kind))
            t1, s1 = table.clone(), _state(kind, 50, 32, g)
            t2, s2 = table.cuda(), cuda(s1)
            _ref_update(bags, TableArgs("t", t1, [2, 0], pooling, s1), grad, update)
            tk.lookup_update(cuda_bags, [TableArgs("t", t2, [2, 0], pooling, s2)], [grad.cuda()], update)
            torch.testing.assert_close(t2.cpu(), t1, atol=1e-4, rtol=1e-4)
            if s1 is not None:
                torch.testing.assert_close(s2.cpu(), s1, atol=1e-4, rtol=1e-4)
