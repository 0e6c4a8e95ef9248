"""Tests for the Criteo TSV reader."""

import gzip
import math

import numpy as np
import pytest
import torch

from sparselift.data import KAGGLE_CARDINALITIES, Batch, CriteoTSV


def _line(label, dense, cats) -> str:
    return "\t".join([str(label), *[str(d) for d in dense], *cats]) + "\n"


def _rows(n: int, seed: int = 0):
    """n synthetic raw rows with missing fields and negative dense values sprinkled in."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        dense = [int(v) for v in rng.integers(-2, 5000, 13)]
        dense = ["" if rng.random() < 0.2 else d for d in dense]
        cats = [f"{int(v):08x}" for v in rng.integers(0, 2**32, 26)]
        cats = ["" if rng.random() < 0.1 else c for c in cats]
        rows.append((i % 2, dense, cats))
    return rows


def _expected(rows, table_rows):
    labels = torch.tensor([r[0] for r in rows], dtype=torch.float32)
    dense = torch.tensor(
        [[math.log1p(max(int(d), 0)) if d != "" else 0.0 for d in r[1]] for r in rows], dtype=torch.float32
    )
    ids = torch.tensor(
        [[(int(c, 16) if c else 0) % table_rows[f] for f, c in enumerate(r[2])] for r in rows],
        dtype=torch.int64,
    )
    return Batch.from_one_hot(dense, ids, labels)


def test_parse_exact_values(tmp_path):
    dense = [1, "", -1, 0, 3, -2, "", 7, 1000000, 2, "", 5, 9]
    cats = ["68fd1e64", "", "0000000a", "ffffffff"] + ["0000002a"] * 21 + [""]
    path = tmp_path / "day.tsv"
    path.write_text(_line(1, dense, cats) + _line(0, [""] * 13, [""] * 26))
    b = CriteoTSV(path).read_all()
    assert b.batch_size == 2 and b.num_sparse == 26
    assert torch.equal(b.labels, torch.tensor([1.0, 0.0]))
    want = [math.log1p(max(d, 0)) if d != "" else 0.0 for d in dense]
    assert torch.equal(b.dense[0], torch.tensor(want, dtype=torch.float32))
    assert torch.equal(b.dense[1], torch.zeros(13))
    assert b.dense.dtype == torch.float32
    ids0 = [b.sparse[f][0][0].item() for f in range(26)]
    assert ids0[0] == 0x68FD1E64 % 1460
    assert ids0[1] == 0  # missing
    assert ids0[2] == 10 % 10131227
    assert ids0[3] == 0xFFFFFFFF % 2202608
    assert ids0[4:25] == [42 % KAGGLE_CARDINALITIES[f] for f in range(4, 25)]
    assert ids0[25] == 0
    assert all(b.sparse[f][0][1].item() == 0 for f in range(26))
    b.validate(KAGGLE_CARDINALITIES)
    for _, offsets in b.sparse:
        assert torch.equal(offsets, torch.arange(3))  # one-hot bags


def test_batches_rows_cap_and_gzip(tmp_path):
    rows = _rows(50, seed=1)
    text = "".join(_line(*r) for r in rows)
    (tmp_path / "a.tsv").write_text(text)
    with gzip.open(tmp_path / "a.tsv.gz", "wt") as fh:
        fh.write(text)
    reader = CriteoTSV(tmp_path / "a.tsv", rows_cap=1000)
    assert max(reader.table_rows) == 1000
    want = _expected(rows, reader.table_rows)

    got = list(reader.batches(16))
    assert [b.batch_size for b in got] == [16, 16, 16]  # drop_last drops the trailing 2 rows
    assert Batch.concat(got).equal(_expected(rows[:48], reader.table_rows))
    assert Batch.concat(list(reader.batches(16, drop_last=False))).equal(want)
    assert len(list(reader.batches(16, num_batches=2))) == 2

    gz = CriteoTSV(tmp_path / "a.tsv.gz", rows_cap=1000).read_all()
    assert gz.equal(want)


def test_multiple_files_and_crlf(tmp_path):
    rows = _rows(10, seed=2)
    (tmp_path / "d0.tsv").write_text("".join(_line(*r) for r in rows[:7]))
    (tmp_path / "d1.tsv").write_bytes("".join(_line(*r) for r in rows[7:]).replace("\n", "\r\n").encode())
    reader = CriteoTSV([tmp_path / "d0.tsv", str(tmp_path / "d1.tsv")])
    got = list(reader.batches(5))
    assert len(got) == 2
    assert Batch.concat(got).equal(_expected(rows, reader.table_rows))


@pytest.mark.parametrize("drop_last", [True, False])
def test_rank_slices_union_is_global_batch(tmp_path, drop_last):
    rows = _rows(70, seed=3)
    path = tmp_path / "r.tsv"
    path.write_text("".join(_line(*r) for r in rows))
    reader = CriteoTSV(path, rows_cap=5000)
    world, local = 3, 8  # global batch 24: 2 full global batches + 22 leftover rows
    per_rank = [list(reader.batches(local, rank=r, world_size=world, drop_last=drop_last)) for r in range(world)]
    steps = 2 if drop_last else 3
    assert all(len(p) == steps for p in per_rank)  # every rank sees the same number of steps
    for step in range(steps):
        union = Batch.concat([per_rank[r][step] for r in range(world)])
        start = step * world * local
        assert union.equal(_expected(rows[start : start + world * local], reader.table_rows))
    if not drop_last:
        assert [per_rank[r][2].batch_size for r in range(world)] == [8, 8, 6]


@pytest.mark.parametrize(
    "bad_line, match",
    [
        ("1\t2\t3\n", "fields"),
        (_line(2, [0] * 13, ["00000001"] * 26), "label"),
        (_line("x", [0] * 13, ["00000001"] * 26), "label"),
        (_line(1, ["1.5"] + [0] * 12, ["00000001"] * 26), "integer"),
        (_line(1, [0] * 13, ["zzzz"] + ["00000001"] * 25), "hex"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, match):
    good = "".join(_line(*r) for r in _rows(3, seed=4))
    path = tmp_path / "bad.tsv"
    path.write_text(good + bad_line + good)
    with pytest.raises(ValueError, match=match) as exc:
        CriteoTSV(path).read_all()
    assert f"{path}:4:" in str(exc.value)


def test_malformed_line_fails_on_every_rank(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("".join(_line(*r) for r in _rows(3, seed=5)) + "1\t2\n")
    for rank in range(2):  # line 4 belongs to rank 1 (local batch 2), but rank 0 must fail too
        with pytest.raises(ValueError, match=r"bad\.tsv:4:"):
            list(CriteoTSV(path).batches(2, rank=rank, world_size=2))
