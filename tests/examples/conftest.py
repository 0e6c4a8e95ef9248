"""Small data sets in the formats the examples read, with a planted signal, so a short run of an
example reaches a test AUC above 0.5."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

OCCUPATIONS = ("student", "engineer", "artist", "writer", "doctor")


def write_movielens(directory: Path, users: int = 30, items: int = 40, per_user: int = 20, seed: int = 0) -> Path:
    """MovieLens-100k's three RecBole files in `directory`: `users * per_user` ratings. Half the
    items are liked (rating 4-5) and tagged Comedy or Romance, the other half disliked (1-2) and
    tagged Horror or Thriller, each with a tenth of the ratings flipped; every item has Drama too
    now and then."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    liked = {i: i % 2 == 0 for i in range(1, items + 1)}
    with open(directory / "ml-100k.item", "w") as f:
        f.write("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n")
        for i, good in liked.items():
            genres = [rng.choice(("Comedy", "Romance") if good else ("Horror", "Thriller"))]
            if rng.random() < 0.3:
                genres.append("Drama")
            f.write(f"{i}\tMovie {i}\t{1970 + i}\t{' '.join(genres)}\n")
    with open(directory / "ml-100k.user", "w") as f:
        f.write("user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n")
        for u in range(1, users + 1):
            gender = "MF"[u % 2]
            f.write(f"{u}\t{rng.randint(15, 70)}\t{gender}\t{rng.choice(OCCUPATIONS)}\t{rng.randint(10000, 99999)}\n")
    with open(directory / "ml-100k.inter", "w") as f:
        f.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        for u in range(1, users + 1):
            for k, i in enumerate(rng.sample(sorted(liked), per_user)):
                good = liked[i] != (rng.random() < 0.1)
                rating = rng.choice((4, 5)) if good else rng.choice((1, 2))
                f.write(f"{u}\t{i}\t{rating}\t{880000000 + 1000 * k + u}\n")
    return directory


def write_criteo(path: Path, lines: int, seed: int) -> Path:
    """Criteo-format TSV lines: the label depends on the categorical features C1 and C6 (40
    values each, every value its own effect) and on I1; the other features are noise (a few
    values each), and a fifth of the other integer features are missing."""
    rng = random.Random(seed)
    effect = [random.Random(1000 + v).gauss(0, 1.5) for v in range(40)]
    with open(path, "w") as f:
        for _ in range(lines):
            cats = [rng.randrange(40 if k in (0, 5) else 4) for k in range(26)]
            i1 = rng.randrange(100)
            logit = effect[cats[0]] + effect[cats[5]] + math.log1p(i1) - 2.5
            label = int(rng.random() < 1 / (1 + math.exp(-2 * logit)))
            ints = [str(i1)] + ["" if rng.random() < 0.2 else str(rng.randrange(-2, 500)) for _ in range(12)]
            hexes = [f"{v * 2654435761 % 2**32:08x}" for v in cats]
            f.write("\t".join([str(label), *ints, *hexes]) + "\n")
    return path


@pytest.fixture(scope="session")
def movielens_data(tmp_path_factory) -> Path:
    return write_movielens(tmp_path_factory.mktemp("ml-100k"))


@pytest.fixture(scope="session")
def criteo_files(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("criteo")
    return write_criteo(d / "train.tsv", 3000, seed=0), write_criteo(d / "test.tsv", 600, seed=1)
