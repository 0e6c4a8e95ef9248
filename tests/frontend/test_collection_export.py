"""TorchRec's `EmbeddingCollection` (unpooled lookups of a KeyedJaggedTensor's jagged values):
how it exports (one feature per position up to the longest bag, `max_lengths`), that the regions
give the collection's `JaggedTensor` values back exactly, and the refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torchrec import KeyedJaggedTensor

from sparselift.codegen.table_facts import describe_features, group_names
from sparselift.frontend.errors import ExportError
from sparselift.frontend.export import export
from sparselift.frontend.jagged import JaggedIds, jagged_position_features, jagged_values

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from parity_models import collection_model  # noqa: E402
from test_export import run_regions  # noqa: E402


def _kjt(hist_lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    hist_lengths = torch.tensor(hist_lengths)
    n = hist_lengths.numel()
    hist = torch.randint(0, 60, (int(hist_lengths.sum()),), generator=g)
    return KeyedJaggedTensor(
        keys=["hist", "target", "hist_cat"],
        values=torch.cat([hist, torch.randint(0, 60, (n,), generator=g), hist % 12]),
        lengths=torch.cat([hist_lengths, torch.ones(n, dtype=torch.int64), hist_lengths]),
    )


def test_a_collection_exports_one_feature_per_position_up_to_the_longest_bag():
    model, (_, user_ids, user_offsets) = collection_model(batch_size=4)
    kjt = _kjt([3, 0, 1, 2])
    program = export(model, (kjt, user_ids, user_offsets), world_size=2, sharding="table_wise")
    features = {f.name: f for f in describe_features(program.module)}
    assert [n for n in features if n.startswith("hist[")] == ["hist[0]", "hist[1]", "hist[2]"]
    assert [features[f"hist[{p}]"].pooling_factor for p in range(3)] == [0.75, 0.5, 0.25]
    assert features["target"].table == "ec.embeddings.item" and features["target"].pooling_factor == 1.0
    assert features["hist_cat[0]"].table == "ec.embeddings.cat"
    assert program.max_lengths == {"hist": 3, "target": 1, "hist_cat": 3}
    # Each unpooled table is a group of its own: its rows can travel one per id.
    assert sorted(group_names(program.module)) == ["ec/table_wise/cat", "ec/table_wise/item", "user/table_wise"]


def test_max_lengths_sets_the_positions_and_is_checked():
    model, (_, user_ids, user_offsets) = collection_model(batch_size=4)
    inputs = (_kjt([3, 0, 1, 2]), user_ids, user_offsets)
    program = export(model, inputs, world_size=2, max_lengths={"hist": 6})
    assert program.max_lengths["hist"] == 6
    assert "hist[5]" in {f.name for f in describe_features(program.module)}
    with pytest.raises(ExportError, match=r"max_lengths\['hist'\] is 2, but the example inputs hold a bag of 3 ids"):
        export(model, inputs, world_size=2, max_lengths={"hist": 2})
    with pytest.raises(ExportError, match=r"max_lengths\['hist'\] must be a positive int, got 0"):
        export(model, inputs, world_size=2, max_lengths={"hist": 0})
    with pytest.raises(ExportError, match=r"max_lengths names 'histroy', which no unpooled lookup of a Keyed"):
        export(model, inputs, world_size=2, max_lengths={"histroy": 6})


@pytest.mark.parametrize("max_lengths", [None, {"hist": 5, "hist_cat": 5}], ids=["example-3", "set-5"])
def test_the_regions_compute_the_model_on_batches_of_other_lengths(max_lengths):
    # The model pads its histories to 4: the categories' padding reads the positions' rows
    # (padded from 3, or cut from 5); the items' values are rebuilt jagged (they have two readers).
    model, (_, user_ids, user_offsets) = collection_model(batch_size=4)
    inputs = (_kjt([3, 0, 1, 2]), user_ids, user_offsets)
    program = export(model, inputs, world_size=1, max_lengths=max_lengths)
    positions = 5 if max_lengths else 3
    views = [(v.features, v.padded) for v in program.regions["dense_post"].calls if v.jagged is not None]
    assert views == [(positions, False), (1, False), (positions, True)]
    later = [(_kjt([5, 2, 0, 4], seed=1), user_ids, user_offsets)] if max_lengths else []
    for batch in [inputs, *later]:
        with torch.no_grad():
            (got,) = run_regions(program, model, batch)
            torch.testing.assert_close(got, model(*batch))


def test_jagged_positions_and_values_round_trip():
    ids = torch.tensor([10, 11, 12, 20, 30, 31, 90])  # key 0: samples of 3, 1, 0, 2 ids; key 1 after
    lengths = torch.tensor([3, 1, 0, 2, 1, 0, 0, 0])
    jagged = JaggedIds("hist", 0, 2, 4)
    features = jagged_position_features(ids[:6], lengths, jagged, None, "item")
    assert [f[0].tolist() for f in features] == [[10, 20, 30], [11, 31], [12], []]
    assert [f[1].tolist() for f in features] == [[0, 1, 2, 2, 3], [0, 1, 1, 1, 2], [0, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    table = torch.randn(100, 3)
    per_position = [
        torch.nn.functional.embedding_bag(i, table, o, mode="sum", include_last_offset=True) for i, o, _ in features
    ]
    values = jagged_values(torch.stack(per_position, 1), lengths, jagged)
    torch.testing.assert_close(values, table[ids[:6]])
    padded = jagged_position_features(ids[:6], lengths, jagged, 11, "item")  # id 11 is padding
    assert [f[0].tolist() for f in padded] == [[10, 20, 30], [31], [12], []]


@pytest.mark.parametrize(
    "lengths, message",
    [
        ([5, 0, 0, 0], "table 'item', feature 'hist': a sample holds 5 ids, more than the 4 the model was compiled"),
        ([-1, 2, 0, 0], "table 'item', feature 'hist': a negative length"),
    ],
)
def test_a_bad_jagged_batch_is_refused_naming_the_feature(lengths, message):
    lengths = torch.tensor(lengths + [1, 1, 1, 1])
    ids = torch.arange(int(lengths[:4].sum()))
    with pytest.raises(ValueError, match=message):
        jagged_position_features(ids, lengths, JaggedIds("hist", 0, 2, 4), None, "item")


def test_a_variable_batch_kjt_is_refused():
    model, (kjt, user_ids, user_offsets) = collection_model(batch_size=4)
    vbe = KeyedJaggedTensor(
        keys=kjt.keys(),
        values=kjt.values(),
        lengths=kjt.lengths(),
        stride_per_key_per_rank=[[4], [4], [4]],
    )
    with pytest.raises(ExportError, match="feature 'hist': a KeyedJaggedTensor with a batch size per key"):
        export(model, (vbe, user_ids, user_offsets), world_size=2)


def test_a_model_returning_the_collections_jagged_tensors_gets_them_back():
    # Their `None` weights are constant outputs: the step yields the values and lengths only.
    from torchrec import EmbeddingCollection, EmbeddingConfig

    import sparselift

    class Lookups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            config = EmbeddingConfig(name="item", embedding_dim=4, num_embeddings=50, feature_names=["h", "t"])
            self.ec = EmbeddingCollection(tables=[config], device=torch.device("cpu"))

        def forward(self, kjt):
            return self.ec(kjt)

    model = Lookups()
    kjt = KeyedJaggedTensor(keys=["h", "t"], values=torch.arange(1, 9), lengths=torch.tensor([2, 0, 3, 1, 1, 1]))
    want = model(kjt)
    compiled = sparselift.compile(model, (kjt,), options=sparselift.CompileOptions(plan="none"))
    assert compiled.program.constant_outputs
    got = compiled(kjt)
    assert set(got) == {"h", "t"}
    for key, jt in got.items():
        torch.testing.assert_close(jt.values(), want[key].values())
        assert torch.equal(jt.lengths(), want[key].lengths()) and jt.weights_or_none() is None
    before = compiled.state_dict()["ec.embeddings.item.weight"].clone()
    got["h"].values().sum().backward()  # trains through the returned values: rows 1-5 step
    changed = (compiled.state_dict()["ec.embeddings.item.weight"] != before).any(1).nonzero().flatten()
    assert changed.tolist() == [1, 2, 3, 4, 5]


def test_each_unpooled_tables_share_of_distinct_ids_is_measured_and_can_be_given():
    from sparselift.codegen.table_facts import distinct_shares

    model, (_, user_ids, user_offsets) = collection_model(batch_size=4)
    kjt = _kjt([3, 0, 1, 2])
    inputs = (kjt, user_ids, user_offsets)
    hist, target, _ = kjt.values().split(kjt.lengths().view(3, 4).sum(1).tolist())
    items = torch.cat([hist, target])  # the item table's ids: the history's and the targets'
    shares = distinct_shares(export(model, inputs, world_size=2).module)
    assert shares["ec.embeddings.item"] == round(items.unique().numel() / items.numel(), 2)
    assert "user" not in shares  # pooled: nothing to deduplicate
    given = export(model, inputs, world_size=2, distinct={"ec.embeddings.item": 0.25})
    assert distinct_shares(given.module)["ec.embeddings.item"] == 0.25
    with pytest.raises(ExportError, match=r"distinct names 'user', not an unpooled table"):
        export(model, inputs, world_size=2, distinct={"user": 0.5})
    with pytest.raises(ExportError, match=r"distinct\['ec.embeddings.item'\] is a share of the table's ids"):
        export(model, inputs, world_size=2, distinct={"ec.embeddings.item": 0.0})
