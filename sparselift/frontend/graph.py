"""Find the embedding lookups in an exported graph and cut the graph around them.

The sparse path is every `aten.embedding_bag` call (pooled) and `aten.embedding` call
(unpooled: `nn.Embedding`, `F.embedding`) plus the nodes that compute its ids, offsets and
per-sample weights from the model inputs. Everything else is dense and is cut into two
torch regions: `dense_pre` (what does not depend on any pooled embedding, e.g. the bottom MLP)
and `dense_post` (the rest, ending in the model outputs). Regions are standalone
`torch.fx.GraphModule`s whose placeholders are exactly their IR operands, in order.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import torch
from torch import fx
from torch.fx.operator_schemas import normalize_function

from sparselift.frontend.errors import ExportError

EMBEDDING_BAG_OPS = (
    torch.ops.aten.embedding_bag.padding_idx,
    torch.ops.aten.embedding_bag.default,
    torch.ops.aten._embedding_bag.default,
    torch.ops.aten._embedding_bag_forward_only.default,
)
PLAIN_EMBEDDING_OPS = (torch.ops.aten.embedding.default,)
MODES = ("sum", "mean", "max")
UNPOOLED = "none"  # the mode of an `aten.embedding` call


@attrs.define
class LookupCall:
    """One lookup in the exported graph: an `embedding_bag` call (one feature reading one table)
    or an `embedding` call (mode "none": one row per id, one feature per id position)."""

    node: fx.Node
    pooled: fx.Node  # getitem(node, 0); for an unpooled call, the call itself
    weight: fx.Node
    indices: fx.Node
    offsets: fx.Node | None
    per_sample_weights: fx.Node | None
    mode: str
    include_last_offset: bool
    table_fqn: str  # parameter FQN, e.g. "emb_l.3.weight"
    caller: str  # module whose forward performs the lookup ("" for the root)
    padding_idx: int | None = None  # ids equal to it read nothing and update nothing

    @property
    def unpooled(self) -> bool:
        return self.mode == UNPOOLED


def _module_path_of(node: fx.Node) -> list[tuple[str, str]]:
    stack = node.meta.get("nn_module_stack") or {}
    return [(fqn, cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))) for fqn, cls in stack.values()]


def _is_embedding_module(cls_name: str) -> bool:
    return cls_name.rsplit(".", 1)[-1] in {"EmbeddingBag", "Embedding"}


def _caller(stack: list[tuple[str, str]]) -> str:
    """The module whose forward performs a lookup: the embedding module's parent."""
    owner = stack[-1][0] if stack else ""
    if stack and _is_embedding_module(stack[-1][1]):
        return stack[-2][0] if len(stack) > 1 else ""
    return owner


def _padding_idx(a: dict, table_fqn: str, rows: int | None) -> int | None:
    padding_idx = a.get("padding_idx")
    if padding_idx is None or padding_idx < 0:  # aten's "no padding" (nn modules store it non-negative)
        return None
    if rows is not None and padding_idx >= rows:
        raise ExportError(f"table '{table_fqn}': padding_idx {padding_idx} is not a row of its {rows} rows")
    return int(padding_idx)


def _table_of(node: fx.Node, weight: fx.Node, what: str) -> tuple[str, int | None]:
    if weight.op != "get_attr":
        raise ExportError(f"{what} '{node.name}': its table is computed, not a parameter of the model")
    val = weight.meta.get("val")
    return weight.target, (int(val.shape[0]) if isinstance(val, torch.Tensor) else None)


def _unpooled_call(node: fx.Node) -> LookupCall:
    """An `aten.embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)` call."""
    _, a = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    table_fqn, rows = _table_of(node, a["weight"], "embedding")
    stack = _module_path_of(node)
    if a.get("scale_grad_by_freq"):
        raise ExportError(f"table '{table_fqn}': scale_grad_by_freq is not supported")
    indices = a["indices"]
    if indices.meta["val"].dim() == 0:
        raise ExportError(
            f"table '{table_fqn}': a lookup of one scalar id has no batch; pass ids of shape [B] or [B, L]"
        )
    return LookupCall(
        node=node,
        pooled=node,
        weight=a["weight"],
        indices=indices,
        offsets=None,
        per_sample_weights=None,
        mode=UNPOOLED,
        include_last_offset=False,
        table_fqn=table_fqn,
        caller=_caller(stack),
        padding_idx=_padding_idx(a, table_fqn, rows),
    )


def find_lookups(gm: fx.GraphModule) -> list[LookupCall]:
    """Every embedding and embedding-bag call of `gm` (the unlifted `ep.module()` graph), in graph order."""
    calls: list[LookupCall] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in PLAIN_EMBEDDING_OPS:
            if node.users:  # an unused result computes nothing
                calls.append(_unpooled_call(node))
            continue
        if node.target not in EMBEDDING_BAG_OPS:
            continue
        _, a = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
        weight = a["weight"]
        table_fqn, rows = _table_of(node, weight, "embedding bag")
        stack = _module_path_of(node)
        owner = stack[-1][0] if stack else ""
        mode = MODES[int(a.get("mode", 0))]
        if mode == "max":
            raise ExportError(
                f"module '{owner or 'the model'}', table '{table_fqn}': max pooling is not supported "
                "(supported: sum, mean)"
            )
        if a.get("scale_grad_by_freq"):
            raise ExportError(f"table '{table_fqn}': scale_grad_by_freq is not supported")
        padding_idx = _padding_idx(a, table_fqn, rows)
        pooled = None
        for user in node.users:
            if user.target is not operator.getitem:
                raise ExportError(f"table '{table_fqn}': the embedding bag's result is used as a tuple")
            if user.args[1] == 0:
                pooled = user
            elif user.users:
                raise ExportError(
                    f"table '{table_fqn}': the model uses the embedding bag's auxiliary outputs "
                    "(offset2bag / bag_size / max_indices), which cannot be separated from the lookup"
                )
        if pooled is None:
            continue  # result unused: nothing to compute
        calls.append(
            LookupCall(
                node=node,
                pooled=pooled,
                weight=weight,
                indices=a["indices"],
                offsets=a.get("offsets"),
                per_sample_weights=a.get("per_sample_weights"),
                mode=mode,
                include_last_offset=bool(a.get("include_last_offset", False)),
                table_fqn=table_fqn,
                caller=_caller(stack),
                padding_idx=padding_idx,
            )
        )
    return calls


def ancestors(nodes: Iterable[fx.Node], stop: set[fx.Node] = frozenset()) -> set[fx.Node]:
    """`nodes` and everything they are computed from, not looking past `stop`."""
    seen: set[fx.Node] = set()
    todo = [n for n in nodes if n is not None]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            todo.extend(n.all_input_nodes)
    return seen


def descendants(nodes: Iterable[fx.Node]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    todo = list(nodes)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(n.users)
    return seen


def extract(gm: fx.GraphModule, inputs: Sequence[fx.Node], outputs: Sequence[fx.Node], what: str) -> fx.GraphModule:
    """A GraphModule computing `outputs` from `inputs` by copying the nodes in between.

    Side-effect-only nodes (guards, shape asserts) are left out: the runtime validates inputs
    itself before any kernel runs. In-place updates of a buffer that computes nothing else
    (batch norm's `num_batches_tracked += 1`) go with the region that reads the buffer's module.
    """
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for i, n in enumerate(inputs):
        p = graph.placeholder(f"{n.name}_{i}" if n.name in {x.name for x in inputs[:i]} else n.name)
        p.meta = dict(n.meta)
        env[n] = p
    needed = ancestors(outputs, stop=set(inputs))
    needed |= _buffer_updates(gm, needed)
    for n in gm.graph.nodes:
        if n not in needed or n in env:
            continue
        if n.op == "placeholder":
            raise ExportError(f"{what}: needs model input '{n.name}' that is not among its operands")
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(tuple(env[o] for o in outputs))
    graph.eliminate_dead_code()
    module = fx.GraphModule(gm, graph)
    module.recompile()
    return module


def _buffer_updates(gm: fx.GraphModule, region: set[fx.Node]) -> set[fx.Node]:
    """In-place ops on a buffer (`get_attr`) whose other operands are constants, and that nothing
    reads, for the modules whose attributes `region` reads: they and their `get_attr`s."""
    modules = {n.target.rpartition(".")[0] for n in region if n.op == "get_attr" and isinstance(n.target, str)}
    out: set[fx.Node] = set()
    for n in gm.graph.nodes:
        target = getattr(n.target, "_schema", None)
        if n.op != "call_function" or n.users or target is None or not target.name.endswith("_"):
            continue
        first = n.args[0] if n.args else None
        rest = [a for a in (*n.args[1:], *n.kwargs.values()) if isinstance(a, fx.Node)]
        if isinstance(first, fx.Node) and first.op == "get_attr" and not rest:
            if str(first.target).rpartition(".")[0] in modules:
                out |= {n, first}
    return out


def user_inputs(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def output_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The graph's computed outputs, in flat output order (constants, such as the `None` weights
    of a JaggedTensor, left out: `constant_outputs`)."""
    return [o for o in _flat_outputs(gm) if isinstance(o, fx.Node)]


def constant_outputs(gm: fx.GraphModule) -> dict[int, Any]:
    """The flat outputs that are constants, not computed (say a JaggedTensor's `None` weights),
    by position."""
    return {i: o for i, o in enumerate(_flat_outputs(gm)) if not isinstance(o, fx.Node)}


def _flat_outputs(gm: fx.GraphModule) -> list[Any]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    flat = out.args[0]
    return [flat] if isinstance(flat, fx.Node) else list(flat)
