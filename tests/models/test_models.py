"""Built-in models: shapes, forward/backward, torch.export structure, registry errors."""

from __future__ import annotations

import math
import textwrap

import attrs
import pytest
import torch

from sparselift.models import MODELS, build, dynamic_shapes, load_user_factory
from sparselift.models.dlrm import (
    DLRMConfig,
    build_dlrm,
    dlrm_bench,
    dlrm_kaggle,
    dlrm_terabyte,
    example_inputs,
)

ROWS_CAP = 1000
BATCH = 8
EB_TARGETS = (torch.ops.aten.embedding_bag.padding_idx, torch.ops.aten._embedding_bag.default)


def _eb_nodes(ep: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.op == "call_function" and n.target in EB_TARGETS]


def _owner(node: torch.fx.Node) -> str:
    # Innermost entry of the module stack: (fqn, class name). Keys can carry "@1" suffixes
    # for repeated calls to one module; the value's fqn does not.
    return list(node.meta["nn_module_stack"].values())[-1][0]


def _table(ep: torch.export.ExportedProgram, node: torch.fx.Node) -> str:
    return ep.graph_signature.inputs_to_parameters[node.args[0].name]


@pytest.fixture(scope="module")
def exported() -> dict[str, tuple[torch.nn.Module, tuple, torch.export.ExportedProgram]]:
    out = {}
    for name in ("dlrm-kaggle", "two-tower", "torchrec-ebc"):
        model, inputs = build(name, rows_cap=ROWS_CAP, batch_size=BATCH)
        out[name] = (model, inputs, torch.export.export(model, inputs, strict=False))
    return out


# --- DLRM configs -------------------------------------------------------------------------


def test_dlrm_preset_shapes() -> None:
    kaggle = dlrm_kaggle()
    assert kaggle.num_tables == 26 and kaggle.embedding_dim == 16
    assert kaggle.bottom_mlp == (13, 512, 256, 64, 16) and kaggle.top_mlp == (512, 256, 1)
    assert kaggle.top_in == 367 == 16 + 26 * 27 // 2
    assert sum(kaggle.cardinalities) == 33_762_577 and kaggle.cardinalities[2] == 10_131_227

    tb = dlrm_terabyte()
    assert tb.num_tables == 26 and tb.embedding_dim == 64 and tb.dense_in == 13
    assert tb.top_in == 64 + 351 and tb.top_mlp == (512, 512, 256, 1)

    bench = dlrm_bench()
    assert bench.cardinalities == (1_000_000,) * 8 and bench.dense_in == 512
    assert bench.top_in == 64 + 36 and bench.pooling == (100,) * 8

    capped = dlrm_kaggle(rows_cap=ROWS_CAP)
    assert max(capped.num_rows) == ROWS_CAP and capped.num_rows[0] == ROWS_CAP and capped.num_rows[8] == 3


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"embedding_dim": 32}, "must equal embedding_dim"),
        ({"mode": "mean", "weighted": True}, "per_sample_weights"),
        ({"mode": "max"}, "mode"),
        ({"id_dtype": "int16"}, "id_dtype"),
        ({"pooling": (1, 2)}, "pooling"),
        ({"rows_cap": 0}, "rows_cap"),
    ],
)
def test_dlrm_config_validation(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attrs.evolve(dlrm_kaggle(), **changes)


def test_dlrm_config_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        dlrm_kaggle().embedding_dim = 8  # type: ignore[misc]


# --- DLRM model ---------------------------------------------------------------------------


def test_dlrm_kaggle_forward_backward() -> None:
    model, inputs = build("dlrm-kaggle", rows_cap=ROWS_CAP, batch_size=BATCH)
    assert len(model.emb_l) == 26 and model.top_l[0].in_features == 367
    assert [e.num_embeddings for e in model.emb_l] == list(dlrm_kaggle(ROWS_CAP).num_rows)
    p = model(*inputs)
    assert p.shape == (BATCH, 1) and bool(((p > 0) & (p < 1)).all())
    p.sum().backward()
    assert all(e.weight.grad is not None and not e.weight.grad.is_sparse for e in model.emb_l)
    assert model.bot_l[0].weight.grad is not None


def test_dlrm_logits_sparse_weighted_int32() -> None:
    cfg = attrs.evolve(dlrm_bench(rows_cap=ROWS_CAP), sparse=True, weighted=True, id_dtype="int32")
    model, inputs = build_dlrm(cfg, batch_size=BATCH)
    assert len(inputs) == 4 and inputs[1][0].dtype == torch.int32 and inputs[2][0].dtype == torch.int32
    assert inputs[0].shape == (BATCH, 512)
    probs = model(*inputs)
    logits_model, _ = build_dlrm(attrs.evolve(cfg, return_logits=True), batch_size=BATCH)
    logits = logits_model(*inputs)
    torch.testing.assert_close(torch.sigmoid(logits), probs)
    torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.ones_like(logits)).backward()
    assert logits_model.emb_l[0].weight.grad.is_sparse
    with pytest.raises(ValueError, match="per_sample_weights"):
        model(*inputs[:3])


def test_dlrm_example_inputs_follow_reference_format() -> None:
    cfg = dlrm_bench(rows_cap=50)  # pooling 100 > 50 rows: bags are capped at the table size
    dense, indices, offsets = example_inputs(cfg, BATCH, seed=3)
    assert dense.shape == (BATCH, 512) and len(indices) == len(offsets) == 8
    for ids, offs in zip(indices, offsets):
        assert offs.shape == (BATCH,) and offs[0] == 0  # no include_last_offset
        lengths = torch.diff(offs, append=torch.tensor([ids.numel()]))
        assert bool((lengths >= 1).all()) and bool((lengths <= 50).all())
        assert 0 <= int(ids.min()) and int(ids.max()) < 50 and ids.dtype == torch.int64
    fixed = attrs.evolve(cfg, fixed_pooling=True)
    _, idx, off = example_inputs(fixed, BATCH)
    assert idx[0].numel() == BATCH * 100 and off[0].tolist() == list(range(0, BATCH * 100, 100))
    again = example_inputs(cfg, BATCH, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(indices, again[1]))


def test_dlrm_seeded_init_matches_reference_ranges() -> None:
    cfg = dlrm_kaggle(rows_cap=ROWS_CAP)
    a, _ = build_dlrm(cfg, batch_size=2)
    b, _ = build_dlrm(cfg, batch_size=2)
    c, _ = build_dlrm(cfg, batch_size=2, seed=1)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.emb_l[0].weight, c.emb_l[0].weight)
    for emb in a.emb_l:
        assert float(emb.weight.abs().max()) <= math.sqrt(1.0 / emb.num_embeddings)


def test_dlrm_dot_interaction_matches_reference_loop() -> None:
    model, (dense, indices, offsets) = build_dlrm(dlrm_kaggle(rows_cap=ROWS_CAP), batch_size=4)
    x = model.bot_l(dense)
    ly = model.apply_emb(indices, offsets, None)
    t = torch.cat([x, *ly], dim=1).view(4, -1, 16)
    z = torch.bmm(t, t.transpose(1, 2))
    # The reference's index lists, built exactly as in dlrm_s_pytorch.py (offset 0 = strict).
    li = torch.tensor([i for i in range(27) for j in range(i)])
    lj = torch.tensor([j for i in range(27) for j in range(i)])
    expected = torch.cat([x, z[:, li, lj]], dim=1)
    torch.testing.assert_close(model.interact_features(x, ly), expected)


# --- other models -------------------------------------------------------------------------


def test_two_tower_forward_backward() -> None:
    model, inputs = build("two-tower", rows_cap=ROWS_CAP, batch_size=BATCH)
    out = model(*inputs)
    assert out.shape == (BATCH,)
    out.sum().backward()
    assert model.item.tag_weight.grad is not None and model.user.emb[2].weight.grad is not None
    assert {e.embedding_dim for e in model.user.emb} == {16, 32}
    assert [e.mode for e in model.item.emb] == ["sum", "mean"]


def test_torchrec_ebc_forward_backward() -> None:
    model, (dense, kjt) = build("torchrec-ebc", batch_size=BATCH)
    assert kjt.keys() == ["f_a", "f_b", "f_c", "f_d", "f_w"] and kjt.weights_or_none() is not None
    assert model.ebc.embedding_bag_configs()[0].feature_names == ["f_a", "f_b"]
    assert model.weighted_ebc.is_weighted()
    out = model(dense, kjt)
    assert out.shape == (BATCH, 1)
    out.sum().backward()
    assert model.ebc.embedding_bags["t_shared"].weight.grad is not None
    assert model.weighted_ebc.embedding_bags["t_w"].weight.grad is not None


# --- torch.export -------------------------------------------------------------------------


def test_export_dlrm_kaggle(exported) -> None:
    _, _, ep = exported["dlrm-kaggle"]
    nodes = _eb_nodes(ep)
    assert len(nodes) == 26
    assert {n.target for n in nodes} == {torch.ops.aten.embedding_bag.padding_idx}
    for k, n in enumerate(nodes):
        assert _owner(n) == f"emb_l.{k}" and _table(ep, n) == f"emb_l.{k}.weight"
        # Ids and offsets come straight from the user-input placeholders.
        assert (n.args[1].name, n.args[2].name) == (f"indices_{k}", f"offsets_{k}")
        assert n.args[4] == 0 and n.args[6] is None  # mode sum, no per_sample_weights
    decomposed = _eb_nodes(ep.run_decompositions())
    assert len(decomposed) == 26 and {n.target for n in decomposed} == {torch.ops.aten._embedding_bag.default}


def test_export_two_tower(exported) -> None:
    _, _, ep = exported["two-tower"]
    nodes = _eb_nodes(ep)
    assert [_owner(n) for n in nodes] == [
        "user.emb.0",
        "user.emb.1",
        "user.emb.2",
        "item.emb.0",
        "item.emb.1",
        "item",
    ]
    assert _table(ep, nodes[-1]) == "item.tag_weight"  # F.embedding_bag on a raw Parameter
    assert [n.args[4] for n in nodes] == [0, 1, 0, 0, 1, 0]
    assert nodes[2].args[6].name == "user_weights"


def test_export_torchrec_ebc(exported) -> None:
    model, inputs, ep = exported["torchrec-ebc"]
    nodes = _eb_nodes(ep)
    # One lookup per feature: the shared table t_shared is looked up twice (f_a, f_b).
    assert len(nodes) == 5
    assert [_table(ep, n) for n in nodes] == [
        "ebc.embedding_bags.t_shared.weight",
        "ebc.embedding_bags.t_shared.weight",
        "ebc.embedding_bags.t_c.weight",
        "ebc.embedding_bags.t_d.weight",
        "weighted_ebc.embedding_bags.t_w.weight",
    ]
    assert [_owner(n) for n in nodes][:2] == ["ebc.embedding_bags.t_shared"] * 2
    assert all(n.args[7] is True for n in nodes)  # torchrec uses include_last_offset=True
    assert [n.args[4] for n in nodes] == [0, 0, 1, 0, 0]
    assert [n.args[6] is not None for n in nodes] == [False] * 4 + [True]
    # Per-feature lengths are data-dependent: .item() + runtime asserts in the graph.
    assert any(n.target == torch.ops.aten.item.default for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(*inputs), model(*inputs))


@pytest.mark.parametrize("name", ["dlrm-bench", "torchrec-ebc"])
def test_export_dynamic_shapes_run_other_batch(name: str) -> None:
    model, inputs = build(name, rows_cap=ROWS_CAP, batch_size=BATCH)
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes(model, inputs), strict=False)
    _, other = build(name, rows_cap=ROWS_CAP, batch_size=BATCH + 5, seed=7)
    torch.testing.assert_close(ep.module()(*other), model(*other))


# --- registry -----------------------------------------------------------------------------


def test_registry_names_and_unknown() -> None:
    assert set(MODELS) == {"dlrm-kaggle", "dlrm-terabyte", "dlrm-bench", "two-tower", "torchrec-ebc", "din"}
    with pytest.raises(ValueError, match="unknown model 'dlrm'.*dlrm-bench, dlrm-kaggle"):
        build("dlrm")
    with pytest.raises(ValueError, match="batch_size"):
        build("two-tower", batch_size=0)


def test_registry_terabyte_capped() -> None:
    model, inputs = build("dlrm-terabyte", rows_cap=100, batch_size=2)
    assert max(e.num_embeddings for e in model.emb_l) == 100
    assert model(*inputs).shape == (2, 1)


def test_load_user_factory(tmp_path) -> None:
    f = tmp_path / "user_model.py"
    f.write_text(
        textwrap.dedent(
            """
            import torch

            def make():
                return torch.nn.EmbeddingBag(10, 4), (torch.tensor([1, 2, 3]), torch.tensor([0, 2]))

            def bad():
                return torch.nn.Linear(2, 2)

            NOT_CALLABLE = 3
            """
        )
    )
    model, inputs = load_user_factory(f"{f}:make")
    assert model(*inputs).shape == (2, 4)
    with pytest.raises(FileNotFoundError, match="model file not found"):
        load_user_factory(f"{tmp_path / 'nope.py'}:make")
    with pytest.raises(AttributeError, match="no attribute 'missing'.*bad, make"):
        load_user_factory(f"{f}:missing")
    with pytest.raises(TypeError, match="must return \\(torch.nn.Module, tuple"):
        load_user_factory(f"{f}:bad")
    with pytest.raises(TypeError, match="not callable"):
        load_user_factory(f"{f}:NOT_CALLABLE")
    with pytest.raises(ValueError, match="path/to/file.py:factory"):
        load_user_factory(str(f))


def test_dlrm_config_accepts_lists() -> None:
    cfg = DLRMConfig(
        name="tiny",
        cardinalities=[5, 6],
        embedding_dim=4,
        bottom_mlp=[3, 4],
        top_mlp=[2, 1],
        pooling=[2, 2],
    )
    assert cfg.cardinalities == (5, 6) and cfg.top_in == 4 + 3
    model, inputs = build_dlrm(cfg, batch_size=3)
    assert model(*inputs).shape == (3, 1)
