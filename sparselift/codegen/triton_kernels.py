"""The `@triton.jit` bodies of the sparse ops on CUDA: pooled lookup and fused backward + update.

Kernels only; their launches, input checks and the update's sort are in
`sparselift.codegen.triton_ops` (call those, not these):

- `lookup_kernel`: one program per output bag (segment, slot, sample) gathers the bag's rows
  `BLOCK_L` ids at a time into a `[BLOCK_L, BLOCK_D]` tile (f32 accumulation, any storage
  dtype), scales by the per-id weight and/or `1 / len` (mean), and writes the pooled row.
- `update_kernel_for(kind)`: the fused backward + update of one optimizer, generated from its
  rule (`sparselift.optim_rules`). One program per position of the table's ids sorted by
  (row, slot); the first position of each row (its head) sums the pooled-gradient rows of its
  occurrences (x scale x `grad_scale`) and applies the optimizer once, exactly as the
  reference aggregates duplicates (SGD too: its summed step `w - lr * g`, once per row). No
  dense or per-id gradient rows are materialized.

How an update kernel is generated (`update_source`): `_UPDATE_TEMPLATE` holds the fixed part
(the head test, the gradient sum, the weight load and store); the rule's statements are
rendered into it with `optim_rules.render_expression` (`g`, `w`, `mean_g2` as Triton locals,
hyperparameters and step values as the kernel's float arguments `hp_<name>`, states and
temporaries as locals `v_<name>`, `sqrt` as `tl.sqrt_rn`, the IEEE square root torch uses).
A table's state buffer holds each state whole, one after the other (`R` rows of `D` floats
for an element state, of one for a row state): an element state's row is loaded and stored as a
`[BLOCK_D]` vector, a row state's as a scalar (stored through lane 0 of a vector store: the
interpreter rejects scalar masks), `mean_g2 = sum(g * g) / D`. Triton's JIT reads a kernel's
source with `inspect`, so the text is written to `<cache>/triton/sl_update_<kind>_<hash>.py`
(`sparselift.cache`; a temporary directory when the cache is not writable) and imported; one
kernel per optimizer kind per process.

The module imports on any machine (without triton `AVAILABLE` is False and no kernel is
defined). The kernels need CUDA tensors, or CPU tensors when the interpreter is on
(`TRITON_INTERPRET=1` set before this module is imported: triton reads it when `@triton.jit`
decorates the kernels, the generated ones at their first use; `INTERPRETED` records what it
saw here).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import string
import sys
import tempfile
import threading
from pathlib import Path

from sparselift.cache import atomic_write, cache_dir
from sparselift.optim_rules import ARGUMENTS, OptimizerRule, StateScope, render_expression, rule_for

try:
    import triton
    import triton.language as tl

    AVAILABLE = True
except Exception:  # pragma: no cover - triton is a dependency, but stay importable without it
    triton = None
    tl = None
    AVAILABLE = False


def _interpret_on() -> bool:
    if not AVAILABLE:
        return False
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        try:
            return bool(knobs.runtime.interpret)
        except Exception:
            pass
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


INTERPRETED = _interpret_on()

__all__ = ["AVAILABLE", "INTERPRETED", "lookup_kernel", "update_arguments", "update_kernel_for", "update_source"]


if AVAILABLE:

    @triton.jit
    def lookup_kernel(
        W,
        idx,
        offs,
        wts,
        slots,
        out,
        F,
        B,
        NS,
        D,
        HAS_W: tl.constexpr,
        MEAN: tl.constexpr,
        BLOCK_L: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0).to(tl.int64)
        b = pid % B
        sk = pid // B
        k = sk % NS
        s = sk // NS
        f = tl.load(slots + k).to(tl.int64)
        bag = (s * F + f) * B + b
        start = tl.load(offs + bag)
        end = tl.load(offs + bag + 1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        inv_n = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
        for p0 in range(start, end, BLOCK_L):
            p = p0 + tl.arange(0, BLOCK_L)
            pm = p < end
            ids = tl.load(idx + p, mask=pm, other=0).to(tl.int64)
            rows = tl.load(W + ids[:, None] * D + d[None, :], mask=pm[:, None] & dmask[None, :], other=0.0)
            rows = rows.to(tl.float32)
            if HAS_W:
                sc = tl.load(wts + p, mask=pm, other=0.0)
                if MEAN:
                    sc = sc * inv_n
                rows = rows * sc[:, None]
            elif MEAN:
                rows = rows * inv_n
            acc += tl.sum(rows, axis=0)
        o = out + (s * B + b) * (NS * D) + k * D + d
        tl.store(o, acc.to(out.dtype.element_ty), mask=dmask)


# ---- the update kernels, generated from the optimizer rules ----------------------------------

_UPDATE_TEMPLATE = string.Template('''\
"""$title update kernel, generated by sparselift.codegen.triton_kernels from the rule
sparselift.optim_rules.RULES['$kind']. Do not edit: a changed rule writes a new file."""

import triton
import triton.language as tl


@triton.jit
def update_kernel(
    W,
    state,
    keys,
    ends,
    gof,
    scl,
    grad,
    BASE,
    ROW0,
    K,
    D,
    R,
    gs,$arguments
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # One program per sorted id position of this table; only the first position of each row
    # (the head) does work: it sums the row's occurrences and updates the row once.
    p = BASE + tl.program_id(0).to(tl.int64)
    grow = tl.load(keys + p) // K
    prev = tl.load(keys + tl.maximum(p - 1, 0)) // K
    head = (p == BASE) | (prev != grow)
    row = grow - ROW0
    e = tl.where(head, tl.load(ends + p), p)
    d = tl.arange(0, BLOCK_D)
    hmask = tl.full([BLOCK_D], 1, tl.int1) & head
    dmask = (d < D) & hmask
    g = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j0 in range(p, e, BLOCK_L):
        j = j0 + tl.arange(0, BLOCK_L)
        jm = j < e
        go = tl.load(gof + j, mask=jm, other=0)
        sc = tl.load(scl + j, mask=jm, other=0.0)
        gr = tl.load(grad + go[:, None] + d[None, :], mask=jm[:, None] & dmask[None, :], other=0.0)
        g += tl.sum((gr * sc[:, None]) * gs, axis=0)
    wp = W + row * D + d
    w = tl.load(wp, mask=dmask, other=0.0).to(tl.float32)
$body
    tl.store(wp, w.to(W.dtype.element_ty), mask=dmask)
''')

_BUILTIN_NAMES = frozenset({"g", "w", "mean_g2"})


def _local(name: str) -> str:
    """A rule name as the generated kernel spells it (no clash with Python or Triton names)."""
    if name in _BUILTIN_NAMES:
        return name
    return f"hp_{name}" if name in ARGUMENTS else f"v_{name}"


def update_arguments(kind: str) -> tuple[str, ...]:
    """The run-time values (`optim_rules.ARGUMENTS`) the kind's kernel takes, in its order, after `gs`."""
    read = rule_for(kind).names_read()
    return tuple(a for a in ARGUMENTS if a in read)


def _linear(per_d: int, ones: int) -> str:
    """`per_d * D + ones` as short Triton source."""
    terms = ([f"{per_d} * D" if per_d != 1 else "D"] if per_d else []) + ([str(ones)] if ones else [])
    return " + ".join(terms) or "0"


def _state_rows(rule: OptimizerRule) -> dict[str, str]:
    """Each state's row `row` in the table's state buffer, in terms of `D` and the table's rows
    `R`: the states whole, one after the other (`OptimizerRule.state_offset`)."""
    per_d = ones = 0
    out = {}
    for s in rule.states:
        start = _linear(per_d, ones)
        width = "D" if s.scope == StateScope.ELEMENT else "1"
        out[s.name] = ("state" if start == "0" else f"state + ({start}) * R") + f" + row * {width}"
        if s.scope == StateScope.ELEMENT:
            per_d += 1
        else:
            ones += 1
    return out


def _statement_lines(statements) -> list[str]:
    def render(expr: str) -> str:
        return render_expression(expr, _local, "tl.sqrt_rn", repr)

    return [f"{_local(target)} = {render(expr)}" for target, expr in statements]


def _rule_body(rule: OptimizerRule) -> str:
    """The kernel lines between the weight's load and store: the rule's row stage (row states
    loaded, `mean_g2`, row statements, row states stored) then its element stage."""
    _check_targets(rule)
    at = _state_rows(rule)
    row_states = [s.name for s in rule.states if s.scope == StateScope.ROW]
    element_states = [s.name for s in rule.states if s.scope == StateScope.ELEMENT]
    lines = [f"{_local(n)} = tl.load({at[n]})" for n in row_states]
    if "mean_g2" in rule.names_read():
        lines.append("mean_g2 = tl.sum(g * g, axis=0) / D")
    lines += _statement_lines(rule.row)
    row_assigned = {t for t, _ in rule.row}
    lines += [
        f"tl.store({at[n]} + d * 0, {_local(n)} + tl.zeros([BLOCK_D], dtype=tl.float32), mask=hmask & (d == 0))"
        for n in row_states
        if n in row_assigned
    ]
    for n in element_states:
        lines.append(f"p_{n} = {at[n]} + d")
        lines.append(f"{_local(n)} = tl.load(p_{n}, mask=dmask, other=0.0)")
    lines += _statement_lines(rule.element)
    element_assigned = {t for t, _ in rule.element}
    lines += [f"tl.store(p_{n}, {_local(n)}, mask=dmask)" for n in element_states if n in element_assigned]
    return "\n".join(f"    {line}" for line in lines)


def _check_targets(rule: OptimizerRule) -> None:
    """Row statements assign only row values, element statements no row state."""
    scope = {s.name: s.scope for s in rule.states}
    for target, _ in rule.row:
        if target in ("g", "w") or scope.get(target) == StateScope.ELEMENT:
            raise ValueError(f"{rule.kind}: a row statement assigns element value '{target}'")
    for target, _ in rule.element:
        if scope.get(target) == StateScope.ROW:
            raise ValueError(f"{rule.kind}: an element statement assigns row state '{target}'")


def update_source(kind: str) -> str:
    """The Python source of `kind`'s update kernel module (see the module docstring)."""
    rule = rule_for(kind)
    arguments = "".join(f"\n    {_local(a)}," for a in update_arguments(kind))
    body = _rule_body(rule)
    return _UPDATE_TEMPLATE.substitute(title=rule.title, kind=str(rule.kind), arguments=arguments, body=body)


_UPDATE_KERNELS: dict[str, object] = {}
_UPDATE_LOCK = threading.Lock()


def update_kernel_for(kind: str):
    """`kind`'s `@triton.jit` update kernel (generated, written and imported at first use)."""
    if not AVAILABLE:
        raise RuntimeError("triton is not installed")
    key = str(rule_for(kind).kind)
    kernel = _UPDATE_KERNELS.get(key)
    if kernel is None:
        with _UPDATE_LOCK:
            kernel = _UPDATE_KERNELS.get(key)
            if kernel is None:
                kernel = _UPDATE_KERNELS[key] = _import_generated(key, update_source(key)).update_kernel
    return kernel


def _import_generated(kind: str, source: str):
    """Write `source` as a module file (its name carries the source's hash, so a file already
    there is this source) and import it: triton's JIT reads kernel source with `inspect`."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"sl_update_{kind}_{digest}"
    path = _source_dir() / f"{name}.py"
    if not (path.exists() and path.read_text() == source):
        atomic_write(path, source)
    module_name = f"sparselift_generated.{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _source_dir() -> Path:
    try:
        path = cache_dir(None, "triton")
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="sparselift-triton-"))
