"""`sparselift bench quality --data movielens-100k` on a small file in MovieLens-100k's format that
the test writes (no download): the three systems train, SparseLift as one process does."""

from __future__ import annotations

import json
import random
from pathlib import Path

from sparselift.bench import quality


def write_ratings(directory: Path, users: int = 30, items: int = 30, per_user: int = 30, seed: int = 0) -> Path:
    """Ratings with a signal: every user likes the Action films (rated 4-5) and rates the others
    1-3, with 10% noise; the item and user files as the real ones."""
    rng = random.Random(seed)
    genres = ["Action", "Comedy", "Drama"]
    directory.mkdir(parents=True, exist_ok=True)
    items_text = ["item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"]
    items_text += [f"{i}\tFilm {i}\t1995\t{genres[i % 3]}" for i in range(1, items + 1)]
    users_text = ["user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token"]
    users_text += [f"{u}\t{20 + u % 40}\t{'MF'[u % 2]}\tjob{u % 4}\t{10000 + 37 * u}" for u in range(1, users + 1)]
    inter = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for u in range(1, users + 1):
        for k, i in enumerate(rng.sample(range(1, items + 1), per_user if per_user <= items else items)):
            liked = (i % 3 == 0) != (rng.random() < 0.1)
            inter.append(f"{u}\t{i}\t{rng.choice((4, 5)) if liked else rng.choice((1, 2, 3))}\t{1000 * u + k}")
    for name, lines in (("ml-100k.item", items_text), ("ml-100k.user", users_text), ("ml-100k.inter", inter)):
        (directory / name).write_text("\n".join(lines) + "\n")
    return directory


def test_three_systems_train_and_sparselift_matches_one_process(tmp_path, capsys):
    data = write_ratings(tmp_path / "ml")
    out = tmp_path / "r.json"
    argv = ["--data", "movielens-100k", "--data-dir", str(data), "--epochs", "1", "--batch-size", "32"]
    argv += ["--sparse-optimizer", "rowwise-adagrad", "--lr", "0.3"]
    argv += ["--json", str(out), "--plot", str(tmp_path / "r.png")]
    assert quality.main(argv) == 0
    r = json.loads(out.read_text())
    assert set(r["models"]) == {"dlrm", "din"}
    for name, m in r["models"].items():
        assert set(m["auc"]) == {"baseline", "torchrec", "sparselift"}, name
        assert abs(m["auc"]["sparselift"] - m["auc"]["baseline"]) <= 1e-3 and m["loss_rmse"] <= 1e-4, (name, m)
        assert len(m["losses"]["sparselift"]) == len(m["losses"]["baseline"]) > 0
    assert r["models"]["dlrm"]["auc"]["baseline"] > 0.6, r["models"]["dlrm"]["auc"]  # the planted taste is learnt
    assert (tmp_path / "r.png").stat().st_size > 0
    assert "SparseLift against one process" in capsys.readouterr().out


def test_missing_data_is_one_line_saying_make_data(tmp_path, capsys):
    assert quality.main(["--data", "movielens-100k", "--data-dir", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "make data" in err and "Traceback" not in err
