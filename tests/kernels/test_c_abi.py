"""The C kernels' interface description (codegen/c_abi.py), its uses, and the cache-file helpers."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import pytest

from sparselift import cache
from sparselift.codegen import c_abi, ckernels
from sparselift.codegen.ckernels import TableSpec


def _defined_signatures(source: str) -> dict[str, str]:
    """Each exported function's definition in the C source, as one normalized line."""
    out = {}
    for e in c_abi.ENTRY_POINTS:
        m = re.search(r"^((?:int|void) " + e.name + r"\([^)]*\))\s*\{", source, re.M)
        assert m, f"{e.name} is not defined"
        out[e.name] = " ".join(m.group(1).split())
    return out


def test_generated_definitions_are_the_description():
    source = ckernels.generate_source([TableSpec(8, optimizer="sgd"), TableSpec(4, "bf16", pooling="mean")])
    assert _defined_signatures(source) == {e.name: e.signature() for e in c_abi.ENTRY_POINTS}
    assert f"#define SL_ABI_VERSION {c_abi.ABI_VERSION}\n" in source
    assert not any(tag in source for tag in ("{{", "{%", "{#")), "a template tag leaked into the C"


def test_abi_version_is_a_stable_hash_of_the_description():
    code = "from sparselift.codegen import c_abi; print(c_abi.ABI_VERSION)"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONHASHSEED=seed),
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str(c_abi.ABI_VERSION)}
    assert 0 < c_abi.ABI_VERSION < 2**31
    changed = c_abi.EntryPoint("sl_copy_blocks", "void", (c_abi.Arg("n", "int"), c_abi.Arg("desc", "const int64_t*")))
    assert changed.signature() not in c_abi.abi_text()


def test_prototypes_wrap_without_losing_arguments():
    for e in c_abi.ENTRY_POINTS:
        text = e.prototype(width=60)
        assert " ".join(text.split()) == e.signature()
        assert max(len(line) for line in text.splitlines()) <= 60, text


def test_loaded_library_binds_every_entry_point(tmp_path):
    from sparselift.runtime.kernels import CKernels

    k = CKernels([TableSpec(4)], cache=tmp_path)
    cdll = k._lib.lib
    for e in c_abi.ENTRY_POINTS:
        fn = getattr(cdll, e.name)
        assert len(fn.argtypes) == len(e.args), e.name
        assert fn.restype is (None if e.restype == "void" else ctypes.c_int), e.name
    assert cdll.sl_abi_version() == c_abi.ABI_VERSION


def test_cache_dir_override_environment_default(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "env"))
    assert cache.cache_dir(tmp_path / "opt", "ckernels") == tmp_path / "opt" / "ckernels"
    assert cache.cache_dir(None, "ckernels") == tmp_path / "env" / "ckernels"
    assert (tmp_path / "env" / "ckernels").is_dir()
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "sparselift"


def test_atomic_write_leaves_the_whole_file_or_the_old_one(tmp_path):
    target = tmp_path / "plan.py"
    cache.atomic_write(target, "x = 1\n")
    assert target.read_text() == "x = 1\n"
    with pytest.raises(RuntimeError), cache.atomic_output(target) as tmp:
        tmp.write_text("x = 2  # half written")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.py"]  # no temporary left behind
