"""Fetch MovieLens-100k into a local cache directory (``make data``).

The MovieLens data sets belong to GroupLens Research (University of Minnesota). Their licence
allows research use, asks for an acknowledgement and forbids redistribution without permission,
so SparseLift never copies the data into its repository: it fetches it into a cache directory
(:func:`movielens_dir`) on the user's machine.

The three RecBole atomic files of MovieLens-100k (``ml-100k.inter``, ``.user``, ``.item``) ship
inside the ``recbole`` wheel (pinned in ``requirements/constraints.txt``). ``make data`` downloads
that wheel with ``pip download --no-deps`` into a temporary directory and unpacks only those three
files; recbole itself is never installed.

Usage: ``python -m sparselift.data.movielens_fetch [--dest DIR]``. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DATA_ENV",
    "FILES",
    "LICENCE_NOTICE",
    "RECBOLE_PIN",
    "FetchError",
    "extract_from_wheel",
    "fetch",
    "main",
    "movielens_dir",
]

# The environment variable naming the data root; the data lies in its `ml-100k` subdirectory.
DATA_ENV = "SPARSELIFT_DATA_DIR"
# The files a loader needs, as named in the destination directory.
FILES = ("ml-100k.inter", "ml-100k.user", "ml-100k.item")
# Where they lie inside the recbole wheel.
WHEEL_PREFIX = "recbole/dataset_example/ml-100k/"
# Used when requirements/constraints.txt (which pins recbole) is not there.
RECBOLE_PIN = "recbole==1.2.1"
_REPO_ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = _REPO_ROOT / "requirements" / "constraints.txt"
PIP_TIMEOUT_S = 900

LICENCE_NOTICE = """\
MovieLens-100k is GroupLens Research's (University of Minnesota). Its licence allows research use,
requires an acknowledgement - cite F. Maxwell Harper and Joseph A. Konstan, "The MovieLens Datasets:
History and Context", ACM Transactions on Interactive Intelligent Systems (TiiS) 5(4), 2015 - and
forbids redistribution without permission, so SparseLift fetches it and never copies it into its
repository. See https://grouplens.org/datasets/movielens/ for the full terms."""


class FetchError(RuntimeError):
    """The data could not be fetched (no network, a pip error, an unexpected wheel)."""


def movielens_dir() -> Path:
    """Where MovieLens-100k lives: ``$SPARSELIFT_DATA_DIR/ml-100k`` if that variable is set (and
    not empty), else ``~/.cache/sparselift/data/ml-100k``."""
    root = os.environ.get(DATA_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "sparselift" / "data"
    return base / "ml-100k"


def missing_files(directory: str | os.PathLike[str]) -> list[str]:
    """The names of :data:`FILES` that are not regular files in ``directory``."""
    return [name for name in FILES if not (Path(directory) / name).is_file()]


def extract_from_wheel(wheel: str | os.PathLike[str], dest: str | os.PathLike[str]) -> list[Path]:
    """Unpack the three MovieLens-100k files from the recbole wheel ``wheel`` into ``dest`` (flat:
    ``dest/ml-100k.inter``, ...), nothing else. Each file is written under a temporary name in
    ``dest`` and renamed into place, so a reader never sees a partial file. Returns their paths."""
    dest = Path(dest)
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            absent = [WHEEL_PREFIX + f for f in FILES if WHEEL_PREFIX + f not in names]
            if absent:
                raise FetchError(f"{wheel} does not contain {', '.join(absent)}")
            dest.mkdir(parents=True, exist_ok=True)
            return [_extract_one(zf, WHEEL_PREFIX + name, dest / name) for name in FILES]
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheel} is not a valid wheel: {e}") from e


def _extract_one(zf: zipfile.ZipFile, member: str, target: Path) -> Path:
    # A fresh name opened exclusively (so the file gets the umask's permissions, as a plain write would).
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        with open(tmp, "xb") as out, zf.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _constrained_pin() -> str | None:
    """The recbole line of requirements/constraints.txt (e.g. ``recbole==1.2.1``), if there is one."""
    if not CONSTRAINTS.is_file():
        return None
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.lower().startswith("recbole") and line[len("recbole") :].lstrip()[:1] in ("=", "<", ">", "~", "!"):
            return line
    return None


def _pip_command(download_dir: Path) -> tuple[list[str], str]:
    """The pip command, and the requirement it asks for (for messages)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q"]
    pin = _constrained_pin()
    if pin is None:
        return [*cmd, RECBOLE_PIN, "-d", str(download_dir)], RECBOLE_PIN
    return [*cmd, "-c", str(CONSTRAINTS), "recbole", "-d", str(download_dir)], pin


def download_wheel(download_dir: Path) -> Path:
    """Download the pinned recbole wheel (no dependencies) into ``download_dir``; its path."""
    cmd, requirement = _pip_command(download_dir)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        raise FetchError(f"pip download of {requirement} did not finish in {PIP_TIMEOUT_S} s") from e
    except OSError as e:
        raise FetchError(f"could not run pip ({e})") from e
    if proc.returncode != 0:
        reason = _pip_reason(f"{proc.stdout}\n{proc.stderr}", requirement)
        raise FetchError(f"pip could not download {requirement}: {reason}")
    wheels = sorted(download_dir.glob("recbole-*.whl"))
    if not wheels:
        got = ", ".join(p.name for p in download_dir.iterdir()) or "nothing"
        raise FetchError(f"pip download of {requirement} produced no wheel (got {got})")
    return wheels[-1]


def _pip_reason(output: str, requirement: str) -> str:
    """One line saying why pip failed: no such distribution (pip's own words for an index it cannot
    reach, too), else pip's last ERROR line, else its last line."""
    if any(s in output for s in ("ResolutionImpossible", "No matching distribution", "Could not find a version")):
        return f"no {requirement} on the package index (no network, or the index does not have it)"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip gave no reason"])[-1]


def fetch(dest: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """Make sure the three files are in ``dest`` (default :func:`movielens_dir`), downloading the
    recbole wheel only when one is missing. Returns the directory and whether it downloaded."""
    directory = Path(dest).expanduser() if dest is not None else movielens_dir()
    if not missing_files(directory):
        return directory, False
    with tempfile.TemporaryDirectory(prefix="sparselift-recbole-") as tmp:
        wheel = download_wheel(Path(tmp))
        try:
            extract_from_wheel(wheel, directory)
        except OSError as e:
            raise FetchError(f"cannot write into {directory}: {e.strerror or e}") from e
    return directory, True


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: fetch, then say where the files are and under which terms."""
    parser = argparse.ArgumentParser(
        prog="python -m sparselift.data.movielens_fetch",
        description="Fetch MovieLens-100k (ml-100k.inter/.user/.item) from the recbole wheel.",
    )
    parser.add_argument("--dest", help=f"destination directory (default: {movielens_dir()})")
    args = parser.parse_args(argv)
    try:
        directory, downloaded = fetch(args.dest)
    except (FetchError, OSError) as e:
        print(f"movielens_fetch: error: {e}", file=sys.stderr)
        return 1
    what = "fetched into" if downloaded else "already in (nothing downloaded)"
    print(f"MovieLens-100k {what} {directory}: {', '.join(FILES)}")
    print(LICENCE_NOTICE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
