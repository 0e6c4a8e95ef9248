"""MovieLens-100k as a click-through-rate (CTR) task: real ids, real skew, real sequences.

The synthetic sources (:mod:`sparselift.data.synthetic`, :mod:`sparselift.data.din_synthetic`) give
table sizes and a planted signal; this module gives a small real data set on which a model trained
through SparseLift can be checked against the same model trained by plain PyTorch or TorchRec
(:mod:`sparselift.models.movielens`).

**The task.** One example per rating (100,000). The label is 1.0 where the rating is >= 4 (the
user liked the movie), else 0.0. The features (:data:`FEATURES`), all int64 ids counted from 0:

* ``user``, ``item``: the user and the movie, dense ids in the order of their tokens (numerically
  where the token is a number);
* ``age``: a bucket, <18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+ (ids 0-6, :data:`AGE_BUCKETS`);
* ``gender``, ``occupation``: the user's, dense ids in token order;
* ``zip``: the first three characters of the user's zip code, upper-cased, dense ids in order;
* ``genres``: the movie's genres, a multi-hot bag (jagged: ``genres_lengths`` and ``genres``); a
  movie with no genre has an empty bag;
* ``history``: the items the user rated before this rating, oldest first, at most ``max_history``
  (the most recent ones), a jagged bag of item ids (it reads the item table).

A user's ratings are put in time order by a stable sort on the timestamp (ties keep the order of
the lines in ``ml-100k.inter``); "before" is that order, so the history never holds the current
rating or a later one. **Split:** per user, the last ``max(1, int(n * test_fraction))`` of the
``n`` ratings (in that order) are the test split, the rest the train split. Within a split the
rows are ordered by (timestamp, user, item), a stable, deterministic order.

**The data** are RecBole's atomic files of MovieLens-100k (``ml-100k.inter``, ``.user``,
``.item``: tab separated, a ``name:type`` header), fetched by ``make data``
(:mod:`sparselift.data.movielens_fetch`) into :func:`movielens_dir`. They are GroupLens Research's
(University of Minnesota): research use with an acknowledgement, no redistribution; SparseLift
never copies them into its repository. Plain Python reads them and torch builds the tensors:
about 1.5 s for the 100,000 ratings on a busy 2-core machine.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import attrs
import torch
from torch import Tensor

from sparselift.data.movielens_fetch import FILES, missing_files, movielens_dir

__all__ = [
    "AGE_BUCKETS",
    "FEATURES",
    "MovieLens",
    "MovieLensDataError",
    "MovieLensMissing",
    "MovieLensSplit",
    "load_movielens",
    "movielens_dir",
]

FEATURES = ("user", "item", "age", "gender", "occupation", "zip", "genres", "history")
AGE_BUCKETS = ("<18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+")
_AGE_EDGES = (18, 25, 35, 45, 50, 56)  # bucket of age a = number of edges <= a
INTER, USER, ITEM = FILES
# file -> (columns it must have, columns it may have); any other column is an error.
_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    INTER: (("user_id", "item_id", "rating", "timestamp"), ()),
    USER: (("user_id", "age", "gender", "occupation", "zip_code"), ()),
    ITEM: (("item_id", "class"), ("movie_title", "release_year")),
}
_SINGLE = ("user", "item", "age", "gender", "occupation", "zip")


class MovieLensDataError(ValueError):
    """A malformed data file; the message names ``file:line`` (1-based; the header is line 1)."""


class MovieLensMissing(FileNotFoundError):
    """The data directory or one of its three files is missing (run ``make data``)."""


def _check_split(split: MovieLensSplit) -> None:
    n = split.label.shape[0]
    for name in (*_SINGLE, "genres_lengths", "history_lengths", "genres", "history"):
        t = getattr(split, name)
        if t.dtype != torch.int64 or t.dim() != 1:
            raise ValueError(f"MovieLensSplit.{name} must be a 1-D int64 tensor, got {t.dtype} {tuple(t.shape)}")
        if name in _SINGLE or name.endswith("_lengths"):
            if t.shape[0] != n:
                raise ValueError(f"MovieLensSplit.{name} has {t.shape[0]} rows, label has {n}")
    if split.label.dtype != torch.float32 or split.label.dim() != 1:
        raise ValueError(f"MovieLensSplit.label must be a 1-D float32 tensor, got {split.label.dtype}")
    for bag in ("genres", "history"):
        lengths, values = getattr(split, f"{bag}_lengths"), getattr(split, bag)
        if int(lengths.sum()) != values.shape[0] or bool((lengths < 0).any()):
            raise ValueError(f"MovieLensSplit.{bag}_lengths do not add up to the {values.shape[0]} values")


@attrs.frozen(eq=False, repr=False)
class MovieLensSplit:
    """One split, row-aligned, one row per interaction (rating).

    ``user`` .. ``zip`` are int64 ``[N]`` dense ids counted from 0. ``genres_lengths`` (int64
    ``[N]``) and ``genres`` (int64 ``[sum]``) are the item's genres as a jagged multi-hot bag;
    ``history_lengths`` and ``history`` the user's previous items (item ids) in time order, oldest
    first, at most ``max_history`` (the most recent ones). ``label`` is float32 ``[N]``: 1.0 where
    the rating is >= 4.
    """

    user: Tensor
    item: Tensor
    age: Tensor
    gender: Tensor
    occupation: Tensor
    zip: Tensor
    genres_lengths: Tensor
    genres: Tensor
    history_lengths: Tensor
    history: Tensor
    label: Tensor

    def __attrs_post_init__(self) -> None:
        _check_split(self)

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def __repr__(self) -> str:
        return f"MovieLensSplit(rows={len(self)}, positives={int(self.label.sum())})"

    def select(self, rows: Tensor) -> MovieLensSplit:
        """The rows ``rows`` (1-D integer indices; repeats allowed), in that order, the jagged bags
        gathered with them."""
        rows = torch.as_tensor(rows)
        if rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype.is_complex or rows.dtype == torch.bool:
            raise TypeError(f"select takes 1-D integer row indices, got {rows.dtype} {tuple(rows.shape)}")
        rows = rows.to(torch.int64)
        single = {name: getattr(self, name)[rows] for name in _SINGLE}
        genres_lengths, genres = _select_jagged(self.genres_lengths, self.genres, rows)
        history_lengths, history = _select_jagged(self.history_lengths, self.history, rows)
        return MovieLensSplit(
            **single,
            genres_lengths=genres_lengths,
            genres=genres,
            history_lengths=history_lengths,
            history=history,
            label=self.label[rows],
        )


@attrs.frozen(eq=False)
class MovieLens:
    """MovieLens-100k as a CTR task: the two splits, each feature's table size (``cardinalities``:
    ``user``, ``item``, ``age``, ``gender``, ``occupation``, ``zip``, ``genres``; ``history``
    reads the item table) and the history cap the splits were built with."""

    train: MovieLensSplit
    test: MovieLensSplit
    cardinalities: dict[str, int]
    max_history: int


def _ranges(starts: Tensor, lengths: Tensor) -> Tensor:
    """The indices ``starts[k] .. starts[k] + lengths[k] - 1`` of every ``k``, concatenated."""
    total = int(lengths.sum())
    offsets = torch.cumsum(lengths, 0) - lengths
    return torch.repeat_interleave(starts - offsets, lengths, output_size=total) + torch.arange(total)


def _select_jagged(lengths: Tensor, values: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    offsets = torch.cumsum(lengths, 0) - lengths
    picked = lengths[rows]
    return picked, values[_ranges(offsets[rows], picked)]


# ---------------------------------------------------------------------------------------------
# Reading the files.


def _token_key(token: str) -> tuple[int, int, str]:
    """Sort key: numbers numerically, before the other tokens, which sort as strings."""
    if token.isascii() and token.isdigit():
        return (0, int(token), token)
    return (1, 0, token)


def _dense(tokens: Iterable[str]) -> dict[str, int]:
    """token -> dense id, in the order of :func:`_token_key`."""
    return {t: i for i, t in enumerate(sorted(set(tokens), key=_token_key))}


def _rows(path: Path) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    """``(line number, fields, column -> field index)`` of every data line of ``path``; checks the
    header against :data:`_COLUMNS` and every line's field count. Blank lines are skipped."""
    required, optional = _COLUMNS[path.name]
    with open(path, encoding="utf-8-sig", newline="") as f:
        header = f.readline().rstrip("\r\n")
        if not header:
            raise MovieLensDataError(f"{path}:1: empty file, expected a header line of name:type columns")
        names = [field.split(":", 1)[0].strip() for field in header.split("\t")]
        for name in names:
            if name not in required and name not in optional:
                expected = ", ".join((*required, *optional))
                raise MovieLensDataError(f"{path}:1: unknown column {name!r} (expected {expected})")
        if len(set(names)) != len(names):
            raise MovieLensDataError(f"{path}:1: a column appears twice in the header {header!r}")
        absent = [name for name in required if name not in names]
        if absent:
            raise MovieLensDataError(f"{path}:1: the header lacks the column(s) {', '.join(absent)}")
        columns = {name: i for i, name in enumerate(names)}
        width = len(names)
        for lineno, line in enumerate(f, 2):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != width:
                if fields == [""]:
                    continue
                raise MovieLensDataError(
                    f"{path}:{lineno}: expected {width} tab-separated fields ({', '.join(names)}), got {len(fields)}"
                )
            yield lineno, fields, columns


def _number(path: Path, lineno: int, column: str, text: str, parse: Callable[[str], float]) -> float:
    try:
        value = parse(text)
    except ValueError:
        kind = "an integer" if parse is int else "a number"
        raise MovieLensDataError(f"{path}:{lineno}: {column} {text!r} is not {kind}") from None
    if not math.isfinite(value):
        raise MovieLensDataError(f"{path}:{lineno}: {column} {text!r} is not a finite number")
    return value


def _age_bucket(path: Path, lineno: int, text: str) -> int:
    age = int(_number(path, lineno, "age", text, int))
    if age < 0:
        raise MovieLensDataError(f"{path}:{lineno}: age {text!r} is negative")
    return bisect.bisect_right(_AGE_EDGES, age)


@attrs.frozen
class _Users:
    ids: dict[str, int]  # user token -> dense id
    features: dict[str, Tensor]  # age, gender, occupation, zip: int64 [users], by dense user id
    cardinalities: dict[str, int]


def _read_users(path: Path) -> _Users:
    ages: dict[str, int] = {}  # user token -> age bucket
    tokens: dict[str, dict[str, str]] = {"gender": {}, "occupation": {}, "zip": {}}  # feature -> user -> token
    for lineno, fields, col in _rows(path):
        user = fields[col["user_id"]]
        if user in ages:
            raise MovieLensDataError(f"{path}:{lineno}: user {user!r} appears twice")
        ages[user] = _age_bucket(path, lineno, fields[col["age"]])
        tokens["gender"][user] = fields[col["gender"]]
        tokens["occupation"][user] = fields[col["occupation"]]
        tokens["zip"][user] = fields[col["zip_code"]][:3].upper()
    ids = _dense(ages)
    order = sorted(ages, key=ids.__getitem__)
    features = {"age": torch.tensor([ages[u] for u in order], dtype=torch.int64)}
    cardinalities = {"user": len(ids), "age": len(AGE_BUCKETS)}
    for name, of_user in tokens.items():
        vocab = _dense(of_user.values())
        features[name] = torch.tensor([vocab[of_user[u]] for u in order], dtype=torch.int64)
        cardinalities[name] = len(vocab)
    return _Users(ids=ids, features=features, cardinalities=cardinalities)


@attrs.frozen
class _Items:
    ids: dict[str, int]  # item token -> dense id
    genre_lengths: Tensor  # int64 [items], by dense item id
    genres: Tensor  # int64 [sum]: each item's genre ids, ascending, no repeats
    num_genres: int


def _read_items(path: Path) -> _Items:
    raw: dict[str, list[str]] = {}
    for lineno, fields, col in _rows(path):
        token = fields[col["item_id"]]
        if token in raw:
            raise MovieLensDataError(f"{path}:{lineno}: item {token!r} appears twice")
        raw[token] = fields[col["class"]].split()
    ids = _dense(raw)
    vocab = _dense(g for bag in raw.values() for g in bag)
    bags = [sorted({vocab[g] for g in raw[t]}) for t in sorted(raw, key=ids.__getitem__)]
    return _Items(
        ids=ids,
        genre_lengths=torch.tensor([len(b) for b in bags], dtype=torch.int64),
        genres=torch.tensor([g for b in bags for g in b], dtype=torch.int64),
        num_genres=len(vocab),
    )


def _read_interactions(
    path: Path, users: Mapping[str, int], items: Mapping[str, int]
) -> tuple[list[int], list[int], list[float], list[float]]:
    """``(user ids, item ids, ratings, timestamps)``, one entry per line, in line order."""
    user, item, rating, stamp = [], [], [], []
    for lineno, fields, col in _rows(path):
        u_tok, i_tok = fields[col["user_id"]], fields[col["item_id"]]
        u, i = users.get(u_tok), items.get(i_tok)
        if u is None:
            raise MovieLensDataError(f"{path}:{lineno}: user {u_tok!r} is not in {USER}")
        if i is None:
            raise MovieLensDataError(f"{path}:{lineno}: item {i_tok!r} is not in {ITEM}")
        r_text, t_text = fields[col["rating"]], fields[col["timestamp"]]
        try:  # the common case without a call per field; _number says what is wrong otherwise
            r, ts = float(r_text), float(t_text)
            ok = math.isfinite(r) and math.isfinite(ts)
        except ValueError:
            ok = False
        if not ok:
            _number(path, lineno, "rating", r_text, float)
            _number(path, lineno, "timestamp", t_text, float)
        user.append(u)
        item.append(i)
        rating.append(r)
        stamp.append(ts)
    return user, item, rating, stamp


# ---------------------------------------------------------------------------------------------
# Building the task.


@attrs.frozen
class _Timeline:
    """All interactions sorted by (user, timestamp, line): each user's ratings in time order."""

    user: Tensor  # int64 [M]
    item: Tensor  # int64 [M]
    label: Tensor  # float32 [M]
    stamp: Tensor  # float64 [M]
    position: Tensor  # int64 [M]: how many of the user's ratings come before this one
    test: Tensor  # bool [M]: in the test split


def _timeline(
    user: list[int], item: list[int], rating: list[float], stamp: list[float], num_users: int, test_fraction: float
) -> _Timeline:
    order = torch.tensor(sorted(range(len(user)), key=lambda k: (user[k], stamp[k])), dtype=torch.int64)
    u = torch.tensor(user, dtype=torch.int64)[order]
    counts = torch.bincount(u, minlength=num_users)
    first = torch.cumsum(counts, 0) - counts
    position = torch.arange(u.shape[0]) - first[u]
    n_test = torch.tensor([max(1, int(n * test_fraction)) if n else 0 for n in counts.tolist()], dtype=torch.int64)
    return _Timeline(
        user=u,
        item=torch.tensor(item, dtype=torch.int64)[order],
        label=(torch.tensor(rating, dtype=torch.float64)[order] >= 4).to(torch.float32),
        stamp=torch.tensor(stamp, dtype=torch.float64)[order],
        position=position,
        test=position >= (counts - n_test)[u],
    )


def _split_rows(t: _Timeline) -> tuple[Tensor, Tensor]:
    """The timeline rows of the train and the test split, each ordered by (timestamp, user, item,
    timeline row). (A Python sort: torch's multi-threaded sort is slow on a busy machine.)"""
    key = list(zip(t.stamp.tolist(), t.user.tolist(), t.item.tolist()))
    test = t.test.tolist()
    train_rows = sorted((k for k, is_test in enumerate(test) if not is_test), key=key.__getitem__)
    test_rows = sorted((k for k, is_test in enumerate(test) if is_test), key=key.__getitem__)
    return torch.tensor(train_rows, dtype=torch.int64), torch.tensor(test_rows, dtype=torch.int64)


def _split(t: _Timeline, rows: Tensor, users: _Users, items: _Items, max_history: int) -> MovieLensSplit:
    """The split of the timeline rows ``rows`` (in that order)."""
    user, item = t.user[rows], t.item[rows]
    genre_offsets = torch.cumsum(items.genre_lengths, 0) - items.genre_lengths
    genres_lengths = items.genre_lengths[item]
    history_lengths = torch.clamp(t.position[rows], max=max_history)
    return MovieLensSplit(
        user=user,
        item=item,
        **{name: users.features[name][user] for name in ("age", "gender", "occupation", "zip")},
        genres_lengths=genres_lengths,
        genres=items.genres[_ranges(genre_offsets[item], genres_lengths)],
        history_lengths=history_lengths,
        history=t.item[_ranges(rows - history_lengths, history_lengths)],
        label=t.label[rows],
    )


def load_movielens(
    directory: str | os.PathLike[str] | None = None, *, max_history: int = 20, test_fraction: float = 0.1
) -> MovieLens:
    """Load MovieLens-100k from ``directory`` (default :func:`movielens_dir`) as a CTR task (see
    the module docstring). Raises :class:`MovieLensMissing` when a file is missing and
    :class:`MovieLensDataError` on a malformed line."""
    if max_history < 0:
        raise ValueError(f"max_history must be >= 0, got {max_history}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    root = Path(directory).expanduser() if directory is not None else movielens_dir()
    absent = missing_files(root)
    if absent:
        raise MovieLensMissing(
            f"MovieLens-100k not found in {root} (missing {', '.join(absent)}): run `make data` "
            f"(or python -m sparselift.data.movielens_fetch --dest {root})"
        )
    users = _read_users(root / USER)
    items = _read_items(root / ITEM)
    user, item, rating, stamp = _read_interactions(root / INTER, users.ids, items.ids)
    t = _timeline(user, item, rating, stamp, len(users.ids), test_fraction)
    train_rows, test_rows = _split_rows(t)
    cardinalities = {
        "user": len(users.ids),
        "item": len(items.ids),
        **{k: users.cardinalities[k] for k in ("age", "gender", "occupation", "zip")},
        "genres": items.num_genres,
    }
    return MovieLens(
        train=_split(t, train_rows, users, items, max_history),
        test=_split(t, test_rows, users, items, max_history),
        cardinalities=cardinalities,
        max_history=max_history,
    )
