"""Tests for the MovieLens-100k loader (`sparselift.data.movielens`) and its fetcher
(`sparselift.data.movielens_fetch`). None needs the download: the files are written into
`tmp_path` in RecBole's format; one test reads the real data when `make data` has fetched it."""

from __future__ import annotations

import re
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from sparselift.data import movielens_fetch
from sparselift.data.movielens import (
    AGE_BUCKETS,
    FEATURES,
    MovieLens,
    MovieLensDataError,
    MovieLensMissing,
    MovieLensSplit,
    load_movielens,
    movielens_dir,
)

# Columns in a different order than RecBole's: the loader finds them by name.
USER_HEADER = "user_id:token\tzip_code:token\tgender:token\tage:token\toccupation:token"
# user token -> (zip code, gender, age, occupation). Dense ids by number: 2 -> 0, 7 -> 1, 10 -> 2, 33 -> 3.
USERS = {
    "2": ("t8h1n", "F", "17", "student"),
    "7": ("85711", "M", "24", "writer"),
    "10": ("85702", "M", "35", "engineer"),
    "33": ("0213", "F", "56", "retired"),
}
ITEM_HEADER = "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"
# item token -> (title, year, genres). Dense ids by number: 1 -> 0, 2 -> 1, 3 -> 2, 5 -> 3, 10 -> 4, 20 -> 5.
ITEMS = {
    "1": ("Toy Story", "1995", "Animation Children's Comedy"),
    "2": ("GoldenEye", "1995", "Action Adventure Thriller"),
    "3": ("Four Rooms", "1995", "Thriller"),
    "10": ("unknown", "", ""),
    "5": ("Copycat", "1995", "Crime Drama Thriller"),
    "20": ("Twice", "1996", "Comedy Comedy Drama"),
}
ITEM_ID = {"1": 0, "2": 1, "3": 2, "5": 3, "10": 4, "20": 5}
USER_ID = {"2": 0, "7": 1, "10": 2, "33": 3}
# Genres sorted: Action 0, Adventure 1, Animation 2, Children's 3, Comedy 4, Crime 5, Drama 6, Thriller 7.
GENRE_BAGS = {0: [2, 3, 4], 1: [0, 1, 7], 2: [7], 3: [5, 6, 7], 4: [], 5: [4, 6]}
INTER_HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float"
# (user, item, rating, timestamp) in line order (line k + 2 of the file): users interleaved, times
# out of order, ties within a user (7 at 100; 2 at 50 and at 95) and across users (7 and 33 at 100).
INTER = [
    ("7", "3", "4", "300"),  # a
    ("2", "1", "5", "50"),
    ("7", "1", "2", "100"),  # b
    ("7", "2", "4", "100"),  # c
    ("10", "5", "3", "70"),
    ("33", "20", "4", "80"),
    ("7", "10", "1", "200"),  # d
    ("2", "10", "4", "50"),
    ("33", "3", "2", "60"),
    ("7", "5", "5", "150"),  # e
    ("2", "2", "3", "40"),
    ("7", "20", "4", "400"),  # f
    ("2", "3", "1", "60"),
    ("7", "1", "3", "250"),  # g
    ("33", "10", "5", "300"),
    ("2", "20", "4", "45"),
    ("7", "3", "5", "100"),  # h
    ("2", "5", "5", "90"),
    ("33", "1", "4", "100"),
    ("7", "2", "4", "500"),  # i
    ("2", "1", "4", "95"),
    ("7", "5", "2", "450"),  # j
    ("2", "2", "2", "95"),
]


def write_movielens(
    directory: Path,
    *,
    users: dict[str, tuple[str, ...]] = USERS,
    items: dict[str, tuple[str, ...]] = ITEMS,
    inter: list[tuple[str, ...]] = INTER,
    newline: str = "\n",
) -> Path:
    """Write the three files in RecBole's format (tab separated, `name:type` header) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)

    def write(name: str, header: str, rows: list[tuple[str, ...]]) -> None:
        lines = [header, *("\t".join(row) for row in rows)]
        (directory / name).write_bytes("".join(line + newline for line in lines).encode())

    write("ml-100k.user", USER_HEADER, [(u, *f) for u, f in users.items()])
    write("ml-100k.item", ITEM_HEADER, [(i, *f) for i, f in items.items()])
    write("ml-100k.inter", INTER_HEADER, inter)
    return directory


def reference(inter, max_history: int, test_fraction: float) -> dict[str, list[tuple]]:
    """The task's rows, naively: per split, (user, item, history, label) in the split's order."""
    by_user = defaultdict(list)
    for line, (u, i, r, ts) in enumerate(inter):
        by_user[USER_ID[u]].append((float(ts), line, ITEM_ID[i], float(r)))
    rows: dict[str, list[tuple]] = {"train": [], "test": []}
    for u, events in by_user.items():
        events.sort(key=lambda e: (e[0], e[1]))
        n_test = max(1, int(len(events) * test_fraction))
        for p, (ts, _, item, rating) in enumerate(events):
            history = [e[2] for e in events[max(0, p - max_history) : p]]
            split = "test" if p >= len(events) - n_test else "train"
            rows[split].append(((ts, u, item, p), (u, item, history, float(rating >= 4))))
    return {split: [row for _, row in sorted(r, key=lambda x: x[0])] for split, r in rows.items()}


def bags(lengths: torch.Tensor, values: torch.Tensor) -> list[list[int]]:
    return [v.tolist() for v in torch.split(values, lengths.tolist())]


def rows_of(split: MovieLensSplit) -> list[tuple]:
    return list(
        zip(
            split.user.tolist(),
            split.item.tolist(),
            bags(split.history_lengths, split.history),
            split.label.tolist(),
        )
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_movielens(tmp_path / "ml")


def test_ids_static_features_and_cardinalities(data_dir):
    ml = load_movielens(data_dir, max_history=3)
    assert isinstance(ml, MovieLens) and ml.max_history == 3
    assert FEATURES == ("user", "item", "age", "gender", "occupation", "zip", "genres", "history")
    assert ml.cardinalities == {
        "user": 4,
        "item": 6,
        "age": 7,
        "gender": 2,
        "occupation": 4,
        "zip": 3,
        "genres": 8,
    }
    # By dense user id (users 2, 7, 10, 33): ages 17, 24, 35, 56; zip prefixes T8H, 857, 857, 021
    # (021 -> 0, 857 -> 1, T8H -> 2); F -> 0, M -> 1; engineer 0, retired 1, student 2, writer 3.
    expect = {"age": [0, 1, 3, 6], "zip": [2, 1, 1, 0], "gender": [0, 1, 1, 0], "occupation": [2, 3, 0, 1]}
    for split in (ml.train, ml.test):
        for name, of_user in expect.items():
            t = getattr(split, name)
            assert t.dtype == torch.int64
            assert t.tolist() == [of_user[u] for u in split.user.tolist()], name
        assert bags(split.genres_lengths, split.genres) == [GENRE_BAGS[i] for i in split.item.tolist()]
        assert split.label.dtype == torch.float32
    assert len(ml.train) + len(ml.test) == len(INTER)
    # The item with no genre has an empty bag; item 20's repeated genre counts once.
    assert torch.equal(ml.train.genres_lengths[ml.train.item == 4], torch.zeros(2, dtype=torch.int64))


def test_user_history_in_time_order_capped(data_dir):
    ml = load_movielens(data_dir, max_history=3)
    # User 7 (dense 1) in time order, ties at t=100 by line: b c h e d g a f j | i (the last: test).
    mine = [row for row in rows_of(ml.train) if row[0] == 1]
    assert [r[1] for r in mine] == [0, 1, 2, 3, 4, 0, 2, 5, 3]
    assert [r[2] for r in mine] == [
        [],
        [0],
        [0, 1],
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 2],
        [0, 2, 5],
    ]
    assert [r[3] for r in mine] == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert [r for r in rows_of(ml.test) if r[0] == 1] == [(1, 1, [2, 5, 3], 1.0)]
    # Uncapped: the whole past; max_history 0: empty bags.
    full = load_movielens(data_dir, max_history=20)
    assert [r for r in rows_of(full.test) if r[0] == 1] == [(1, 1, [0, 1, 2, 3, 4, 0, 2, 5, 3], 1.0)]
    none = load_movielens(data_dir, max_history=0)
    assert int(none.train.history_lengths.sum()) == 0 and none.train.history.numel() == 0


def test_split_order(data_dir):
    ml = load_movielens(data_dir, max_history=3)
    # One test row per user (the last in time: for user 2 the later of two lines at t=95),
    # ordered by time: user 10 at 70, user 2 at 95, user 33 at 300, user 7 at 500.
    assert ml.test.user.tolist() == [2, 0, 3, 1]
    assert ml.test.item.tolist() == [3, 1, 4, 1]
    # The train split is in (timestamp, user, item) order: at t=100 user 7's three (items 0, 1, 2)
    # before user 33's; at t=50 user 2's items 0 then 4.
    assert rows_of(ml.train)[:4] == [(0, 1, [], 0.0), (0, 5, [1], 1.0), (0, 0, [1, 5], 1.0), (0, 4, [1, 5, 0], 1.0)]
    at_100 = [(r[0], r[1]) for r in rows_of(ml.train)][9:13]
    assert at_100 == [(1, 0), (1, 1), (1, 2), (3, 0)]


@pytest.mark.parametrize("max_history", [0, 1, 3, 20])
@pytest.mark.parametrize("test_fraction", [0.0, 0.1, 0.25, 0.5, 1.0])
def test_matches_reference(data_dir, max_history, test_fraction):
    ml = load_movielens(data_dir, max_history=max_history, test_fraction=test_fraction)
    expected = reference(INTER, max_history, test_fraction)
    assert rows_of(ml.train) == expected["train"]
    assert rows_of(ml.test) == expected["test"]


def test_test_fraction_sizes(data_dir):
    # Users have 8, 10, 1 and 4 ratings: 10% -> 1 each; 25% -> 2, 2, 1, 1; 100% -> everything.
    assert len(load_movielens(data_dir).test) == 4
    quarter = load_movielens(data_dir, test_fraction=0.25)
    assert torch.bincount(quarter.test.user, minlength=4).tolist() == [2, 2, 1, 1]
    assert len(quarter.train) == len(INTER) - 6
    assert len(load_movielens(data_dir, test_fraction=1.0).train) == 0
    with pytest.raises(ValueError, match="test_fraction"):
        load_movielens(data_dir, test_fraction=1.5)
    with pytest.raises(ValueError, match="max_history"):
        load_movielens(data_dir, max_history=-1)


def test_age_buckets(tmp_path):
    ages = [0, 17, 18, 24, 25, 34, 35, 44, 45, 49, 50, 55, 56, 90]
    users = {str(k + 1): ("12345", "M", str(age), "other") for k, age in enumerate(ages)}
    inter = [(str(k + 1), "1", "4", str(k)) for k in range(len(ages))]
    ml = load_movielens(write_movielens(tmp_path, users=users, inter=inter))
    assert len(AGE_BUCKETS) == 7
    assert ml.test.age.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]


def test_select(data_dir):
    train = load_movielens(data_dir, max_history=3).train
    rows = torch.tensor([5, 0, 12, 5, len(train) - 1])
    got = train.select(rows)
    assert len(got) == 5
    every = rows_of(train)
    assert rows_of(got) == [every[k] for k in rows.tolist()]
    all_genres = bags(train.genres_lengths, train.genres)
    assert bags(got.genres_lengths, got.genres) == [all_genres[k] for k in rows.tolist()]
    for name in ("age", "gender", "occupation", "zip"):
        assert torch.equal(getattr(got, name), getattr(train, name)[rows])
    assert len(train.select(torch.tensor([], dtype=torch.int64))) == 0
    assert rows_of(train.select(torch.arange(len(train), dtype=torch.int32))) == every
    with pytest.raises(TypeError):
        train.select(torch.tensor([True, False]))


def test_crlf_and_trailing_blank_line(tmp_path):
    plain = load_movielens(write_movielens(tmp_path / "a"), max_history=3)
    crlf_dir = write_movielens(tmp_path / "b", newline="\r\n")
    with open(crlf_dir / "ml-100k.inter", "a") as f:
        f.write("\n")
    crlf = load_movielens(crlf_dir, max_history=3)
    assert rows_of(crlf.train) == rows_of(plain.train) and rows_of(crlf.test) == rows_of(plain.test)
    assert crlf.cardinalities == plain.cardinalities


# ---------------------------------------------------------------------------------------------
# Bad input.


def test_missing_directory(tmp_path):
    where = tmp_path / "nowhere"
    with pytest.raises(MovieLensMissing) as info:
        load_movielens(where)
    message = str(info.value)
    assert "\n" not in message
    assert str(where) in message and "make data" in message
    assert "ml-100k.inter, ml-100k.user, ml-100k.item" in message
    assert f"movielens_fetch --dest {where}" in message
    assert isinstance(info.value, FileNotFoundError)


def test_missing_one_file(data_dir):
    (data_dir / "ml-100k.item").unlink()
    with pytest.raises(MovieLensMissing, match=r"\(missing ml-100k\.item\): run `make data`"):
        load_movielens(data_dir)


def test_default_directory_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSELIFT_DATA_DIR", str(tmp_path / "data"))
    write_movielens(tmp_path / "data" / "ml-100k")
    assert movielens_dir() == tmp_path / "data" / "ml-100k"
    assert len(load_movielens().test) == 4


def _corrupt(directory: Path, name: str, line: int, text: str) -> None:
    """Replace line `line` (1-based; the header is line 1) of `name` with `text`."""
    path = directory / name
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("name", "line", "text", "what"),
    [
        ("ml-100k.inter", 5, "7\t2\t4", r"expected 4 tab-separated fields .*got 3"),
        ("ml-100k.inter", 3, "2\t1\tfive\t50", r"rating 'five' is not a number"),
        ("ml-100k.inter", 9, "2\t10\t4\tnan", r"timestamp 'nan' is not a finite number"),
        ("ml-100k.inter", 1, "user_id:token\titem_id:token\tscore:float\ttimestamp:float", r"unknown column 'score'"),
        ("ml-100k.user", 3, "7\t85711\tM\ttwenty\twriter", r"age 'twenty' is not an integer"),
        ("ml-100k.user", 4, "7\t85711\tM\t30\twriter", r"user '7' appears twice"),
        ("ml-100k.item", 2, "1\tToy Story\t1995\tComedy\textra", r"expected 4 tab-separated fields"),
        ("ml-100k.item", 1, "item_id:token\tmovie_title:token_seq", r"the header lacks the column\(s\) class"),
    ],
)
def test_malformed_line_names_file_and_line(data_dir, name, line, text, what):
    _corrupt(data_dir, name, line, text)
    with pytest.raises(MovieLensDataError, match=rf"{re.escape(name)}:{line}: {what}"):
        load_movielens(data_dir)


def test_unknown_item_and_user(tmp_path):
    inter = [*INTER[:6], ("7", "99", "4", "10"), *INTER[6:]]
    with pytest.raises(MovieLensDataError, match=r"ml-100k\.inter:8: item '99' is not in ml-100k\.item"):
        load_movielens(write_movielens(tmp_path / "a", inter=inter))
    inter = [*INTER[:2], ("8", "1", "4", "10")]
    with pytest.raises(MovieLensDataError, match=r"ml-100k\.inter:4: user '8' is not in ml-100k\.user"):
        load_movielens(write_movielens(tmp_path / "b", inter=inter))


def test_empty_file(data_dir):
    (data_dir / "ml-100k.user").write_text("")
    with pytest.raises(MovieLensDataError, match=r"ml-100k\.user:1: empty file"):
        load_movielens(data_dir)


# ---------------------------------------------------------------------------------------------
# Fetching (no network: a fake wheel).


def test_movielens_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSELIFT_DATA_DIR", str(tmp_path / "root"))
    assert movielens_fetch.movielens_dir() == tmp_path / "root" / "ml-100k"
    monkeypatch.delenv("SPARSELIFT_DATA_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert movielens_fetch.movielens_dir() == tmp_path / "home" / ".cache" / "sparselift" / "data" / "ml-100k"


def fake_wheel(path: Path, members: tuple[str, ...] = movielens_fetch.FILES) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("recbole/__init__.py", "raise SystemExit('never imported')\n")
        zf.writestr("recbole/dataset_example/ml-100k/ml-100k.kg", "kg\n")
        zf.writestr("recbole/dataset_example/ml-1m/ml-1m.inter", "other\n")
        zf.writestr("recbole-1.2.1.dist-info/METADATA", "Name: recbole\n")
        for name in members:
            zf.writestr(f"recbole/dataset_example/ml-100k/{name}", f"contents of {name}\n")
    return path


def test_extract_from_wheel(tmp_path):
    wheel = fake_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl")
    dest = tmp_path / "out" / "ml-100k"
    paths = movielens_fetch.extract_from_wheel(wheel, dest)
    assert paths == [dest / name for name in movielens_fetch.FILES]
    assert sorted(p.name for p in dest.iterdir()) == sorted(movielens_fetch.FILES)  # nothing else, no temp files
    for name in movielens_fetch.FILES:
        assert (dest / name).read_text() == f"contents of {name}\n"
    # A second extraction replaces the files in place.
    movielens_fetch.extract_from_wheel(wheel, dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(movielens_fetch.FILES)


def test_extract_from_bad_wheel(tmp_path):
    wheel = fake_wheel(tmp_path / "w.whl", members=("ml-100k.inter", "ml-100k.user"))
    with pytest.raises(movielens_fetch.FetchError, match="ml-100k.item"):
        movielens_fetch.extract_from_wheel(wheel, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "junk.whl").write_text("not a zip")
    with pytest.raises(movielens_fetch.FetchError, match="not a valid wheel"):
        movielens_fetch.extract_from_wheel(tmp_path / "junk.whl", tmp_path / "out")


def test_fetch_downloads_only_when_missing(tmp_path, monkeypatch):
    calls = []

    def download(directory: Path) -> Path:
        calls.append(directory)
        return fake_wheel(directory / "recbole-1.2.1-py3-none-any.whl")

    monkeypatch.setattr(movielens_fetch, "download_wheel", download)
    dest = tmp_path / "ml-100k"
    assert movielens_fetch.fetch(dest) == (dest, True)
    assert movielens_fetch.fetch(dest) == (dest, False)
    assert len(calls) == 1
    assert not calls[0].exists()  # the wheel went with its temporary directory
    assert sorted(p.name for p in dest.iterdir()) == sorted(movielens_fetch.FILES)


def test_fetch_failure_is_one_line(tmp_path, monkeypatch, capsys):
    def download(directory: Path) -> Path:
        raise movielens_fetch.FetchError("pip could not download recbole==1.2.1: no network")

    monkeypatch.setattr(movielens_fetch, "download_wheel", download)
    assert movielens_fetch.main(["--dest", str(tmp_path / "ml")]) == 1
    err = capsys.readouterr().err
    assert err == "movielens_fetch: error: pip could not download recbole==1.2.1: no network\n"


def test_fetch_main_prints_place_and_licence(tmp_path, capsys):
    write_movielens(tmp_path)
    assert movielens_fetch.main(["--dest", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "nothing downloaded" in out
    assert "GroupLens" in out and "Harper" in out and "redistribution" in out


def test_pip_command_uses_the_constraints_pin(tmp_path):
    assert movielens_fetch._constrained_pin() == movielens_fetch.RECBOLE_PIN == "recbole==1.2.1"
    cmd, requirement = movielens_fetch._pip_command(tmp_path)
    assert cmd[-5:] == ["-c", str(movielens_fetch.CONSTRAINTS), "recbole", "-d", str(tmp_path)]
    assert "--no-deps" in cmd and requirement == "recbole==1.2.1"


# ---------------------------------------------------------------------------------------------
# The real data, when `make data` has fetched it.


def test_real_movielens_100k():
    if movielens_fetch.missing_files(movielens_dir()):
        pytest.skip(f"MovieLens-100k not in {movielens_dir()} (run `make data`)")
    ml = load_movielens()
    assert ml.cardinalities["user"] == 943 and ml.cardinalities["item"] == 1682
    assert len(ml.train) + len(ml.test) == 100_000
    assert len(ml.test) >= 943 and torch.unique(ml.test.user).numel() == 943
    assert ml.cardinalities["age"] == 7 and ml.cardinalities["gender"] == 2
    for split in (ml.train, ml.test):
        for name in ("user", "item", "age", "gender", "occupation", "zip"):
            assert 0 <= int(getattr(split, name).min()) and int(getattr(split, name).max()) < ml.cardinalities[name]
        assert int(split.history.max()) < ml.cardinalities["item"]
        assert int(split.genres.max()) < ml.cardinalities["genres"]
        assert int(split.history_lengths.max()) <= ml.max_history
