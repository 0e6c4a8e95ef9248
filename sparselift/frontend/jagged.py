"""TorchRec KeyedJaggedTensor features in an exported graph, and the unpooled lookups of their
jagged values (TorchRec's `EmbeddingCollection`).

TorchRec splits a KJT's `_values` per key (`split_with_sizes(kjt._values, ...)[k]`), so a
lookup's ids name their feature by that split. An `EmbeddingCollection` looks the values up
without pooling: its `JaggedTensor` result holds one row per id, in the values' order (sample
after sample). SparseLift lowers such a feature like a padded `[B, L]` history
(`CallInputs.jagged`): one feature per position up to the longest bag `L` (the example's, or
the user's `max_lengths`), whose bags hold that position's id or nothing; `UnpooledViews` turns
the positions' rows back into the jagged values. A later batch with a longer bag is refused
with a message naming the feature and the option (on every rank: it is a batch error).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import attrs
import torch
import torch.utils._pytree as pytree
from torch import fx

from sparselift.frontend.errors import ExportError


@attrs.frozen
class KJTFeature:
    """Where a lookup's ids come from: key `index` of `keys` of a KeyedJaggedTensor input."""

    key: str
    index: int
    keys: int
    kjt: Any  # the example's KeyedJaggedTensor
    lengths: fx.Node | None  # the graph input of its `_lengths`


@attrs.frozen
class JaggedIds:
    """An unpooled lookup of a KJT key's jagged values: the key (`index` of `keys`; the KJT's
    lengths are key after key) and the longest bag it is compiled for."""

    key: str
    index: int
    keys: int
    max_length: int


def kjt_feature(indices: fx.Node, input_objects: Mapping[fx.Node, tuple[Any, Any]]) -> KJTFeature | None:
    """For `ids = split_with_sizes(kjt._values)[k]`: the KJT's key `k` and its lengths input."""
    if indices.op != "call_function" or getattr(indices.target, "__name__", "") != "getitem":
        return None
    split, k = indices.args
    if not isinstance(split, fx.Node) or "split" not in str(split.target):
        return None
    source = split.args[0]
    if source not in input_objects:
        return None
    path, root = input_objects[source]
    if not path or pytree.keystr(path[-1:]) != "._values":
        return None
    obj = root
    for key in path[:-1]:
        obj = key.get(obj)
    keys = getattr(obj, "keys", None)
    if not callable(keys) or not isinstance(k, int):
        return None
    lengths_path = pytree.keystr(path[:-1]) + "._lengths"
    lengths = next((n for n, (p, _) in input_objects.items() if pytree.keystr(p) == lengths_path), None)
    return KJTFeature(keys()[k], k, len(keys()), obj, lengths)


def jagged_ids(feature: KJTFeature, table: str, module: str, max_lengths: Mapping[str, int] | None) -> JaggedIds:
    """The jagged source of an unpooled lookup of `feature`'s values, with the longest bag it is
    compiled for: `max_lengths[key]`, else the example's longest (at least 1)."""
    where = f"module '{module}', table '{table}', feature '{feature.key}'"
    kjt = feature.kjt
    if kjt.variable_stride_per_key():
        raise ExportError(
            f"{where}: a KeyedJaggedTensor with a batch size per key (variable stride) is not supported for "
            "unpooled lookups; give every key the same batch"
        )
    if feature.lengths is None:
        raise ExportError(f"{where}: the KeyedJaggedTensor's lengths are not a model input")
    lengths = kjt.lengths()
    per_key = lengths.view(feature.keys, -1)[feature.index] if lengths.numel() else lengths
    longest = int(per_key.max()) if per_key.numel() else 0
    chosen = (max_lengths or {}).get(feature.key)
    if chosen is None:
        return JaggedIds(feature.key, feature.index, feature.keys, max(longest, 1))
    if not isinstance(chosen, int) or isinstance(chosen, bool) or chosen < 1:
        raise ExportError(f"{where}: max_lengths['{feature.key}'] must be a positive int, got {chosen!r}")
    if chosen < longest:
        raise ExportError(
            f"{where}: max_lengths['{feature.key}'] is {chosen}, but the example inputs hold a bag of {longest} ids"
        )
    return JaggedIds(feature.key, feature.index, feature.keys, chosen)


def check_max_lengths(max_lengths: Mapping[str, int] | None, jagged: Mapping[Any, JaggedIds]) -> None:
    """Every key of `max_lengths` names a jagged unpooled feature."""
    known = {j.key for j in jagged.values()}
    unknown = sorted(set(max_lengths or {}) - known)
    if unknown:
        listed = ", ".join(sorted(known)) or "none"
        raise ExportError(
            f"max_lengths names {', '.join(repr(k) for k in unknown)}, which no unpooled lookup of a "
            f"KeyedJaggedTensor reads (those read: {listed})"
        )


def jagged_position_features(
    ids: torch.Tensor, lengths: torch.Tensor, jagged: JaggedIds, padding_idx: int | None, table: str
) -> list[tuple[torch.Tensor, torch.Tensor, None]]:
    """A key's jagged ids (`lengths` is the KJT's, every key's) as `max_length` features of
    one-id bags: feature `p`'s bag `b` holds sample `b`'s `p`-th id, or nothing where the sample
    has fewer ids (or that id is `padding_idx`)."""
    where = f"table '{table}', feature '{jagged.key}'"
    if lengths.numel() % jagged.keys:
        raise ValueError(f"{where}: {lengths.numel()} lengths for {jagged.keys} keys")
    own = lengths.view(jagged.keys, -1)[jagged.index].to(torch.int64)
    if int(own.sum()) != ids.numel():
        raise ValueError(f"{where}: the lengths count {int(own.sum())} ids, the values {ids.numel()}")
    if own.numel() and int(own.max()) > jagged.max_length:
        raise ValueError(
            f"{where}: a sample holds {int(own.max())} ids, more than the {jagged.max_length} the model was "
            f"compiled for; compile with max_lengths={{'{jagged.key}': {int(own.max())}}} (or more)"
        )
    if own.numel() and int(own.min()) < 0:
        raise ValueError(f"{where}: a negative length")
    positions = torch.arange(jagged.max_length, device=ids.device)
    filled = positions[:, None] < own[None, :]  # [L, B]: position p of sample b holds an id
    starts = torch.cumsum(own, 0) - own
    # Sample b's p-th id sits at starts[b] + p; position-major order gives each feature's bags.
    where_ids = (starts[None, :] + positions[:, None])[filled]
    by_position = ids[where_ids]
    if padding_idx is not None:
        kept = by_position != padding_idx
        filled = filled.clone()
        filled[filled.clone()] = kept
        by_position = by_position[kept]
    counts = filled.sum(1)
    offsets = torch.cat([filled.new_zeros(jagged.max_length, 1, dtype=torch.int64), filled.cumsum(1)], 1)
    return [(i, o, None) for i, o in zip(by_position.split(counts.tolist()), offsets)]


# Ops a lookup's values pass through unchanged in shape on their way to the padding: a dtype
# cast (`EmbeddingCollection` calls `.float()`) and export's metadata asserts.
_PASS_THROUGH = {torch.ops.aten.to.dtype, torch.ops.aten._assert_tensor_metadata.default}


def fold_padding(gm: fx.GraphModule, lookup: fx.Node, lengths: fx.Node, jagged: JaggedIds) -> bool:
    """Rewrite `jagged_to_padded_dense(values, [offsets of this key], [L'])` (what
    `JaggedTensor.to_padded_dense` exports to) so that it reads the positions' rows `[B, L, dim]`
    directly (`fit_positions`): the jagged values are never built, nor padded again. Only when
    that padding is all that reads the values (through a dtype cast) and its offsets are the
    cumulative lengths of this very key; otherwise nothing changes. True if it rewrote."""
    chain, node = [lookup], lookup
    while True:
        readers = [u for u in node.users if u.target is not torch.ops.aten._assert_tensor_metadata.default]
        if len(readers) != 1:
            return False
        node = readers[0]
        if node.target not in _PASS_THROUGH:
            break
        chain.append(node)
    pad_op = getattr(getattr(torch.ops, "fbgemm", None), "jagged_to_padded_dense", None)
    if pad_op is None or node.target is not pad_op.default or not _pads_by_own_offsets(node, lengths, jagged):
        return False
    (length,) = node.args[2]
    with gm.graph.inserting_before(node):
        fitted = gm.graph.call_function(fit_positions, (chain[-1], int(length)))
    fitted.meta = dict(node.meta)
    node.replace_all_uses_with(fitted)
    gm.graph.erase_node(node)
    return True


def _pads_by_own_offsets(pad: fx.Node, lengths: fx.Node, jagged: JaggedIds) -> bool:
    """`pad` is `jagged_to_padded_dense(x, [complete_cumsum(unbind(lengths.view(K, B))[k])], [L'])`
    with zero padding, `k` and `K` this key's index and the KJT's key count."""
    padding = pad.args[3] if len(pad.args) > 3 else pad.kwargs.get("padding_value", 0.0)
    offsets, sizes = pad.args[1], pad.args[2]
    if padding != 0 or len(offsets) != 1 or len(sizes) != 1 or not isinstance(sizes[0], int):
        return False
    cumsum = offsets[0]
    if not _calls(cumsum, torch.ops.fbgemm.asynchronous_complete_cumsum.default):
        return False
    getitem = cumsum.args[0]
    if not _calls(getitem, operator.getitem) or getitem.args[1] != jagged.index:
        return False
    unbind = getitem.args[0]
    if not _calls(unbind, torch.ops.aten.unbind.int) or (len(unbind.args) > 1 and unbind.args[1] != 0):
        return False
    view = unbind.args[0]
    return _calls(view, torch.ops.aten.view.default) and view.args[0] is lengths and view.args[1][0] == jagged.keys


def _calls(node: Any, target: Any) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target is target


def fit_positions(rows: torch.Tensor, length: int) -> torch.Tensor:
    """Positions' rows `[B, L, dim]` (zeros past each sample's history) as a `[B, length, dim]`
    padding of the jagged values: cut, or padded with zeros."""
    have = rows.shape[1]
    if have >= length:
        return rows[:, :length]
    return torch.nn.functional.pad(rows, (0, 0, 0, length - have))


def jagged_values(rows: torch.Tensor, lengths: torch.Tensor, jagged: JaggedIds) -> torch.Tensor:
    """The positions' rows `[B, L, dim]` back as the key's jagged values `[sum(lengths), dim]`,
    sample after sample (an `EmbeddingCollection`'s `JaggedTensor` values)."""
    own = lengths.view(jagged.keys, -1)[jagged.index]
    filled = torch.arange(jagged.max_length, device=rows.device)[None, :] < own[:, None]
    return rows[filled]


__all__ = [
    "JaggedIds",
    "KJTFeature",
    "check_max_lengths",
    "fit_positions",
    "fold_padding",
    "jagged_ids",
    "jagged_position_features",
    "jagged_values",
]
