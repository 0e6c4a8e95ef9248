"""Big table shards on transparent huge pages: allocated on them, or collapsed onto them in place.

The kernel only hands out huge pages where THP is `always`, or `madvise` with the range advised.
These tests need one of the two (this VM and CI run in `madvise` mode); elsewhere they skip.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from torch import nn

import sparselift
from sparselift.runtime import huge_pages

pytestmark = pytest.mark.skipif(
    huge_pages.thp_mode() not in ("always", "madvise"), reason="needs transparent huge pages (Linux THP)"
)

MIB = 1 << 20


def _mapped(address: int) -> bool:
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            if lo <= address < hi:
                return True
    return False


def test_a_new_shard_faults_in_on_huge_pages_and_its_mapping_goes_with_it():
    shard = huge_pages.empty_shard((160_000, 64), torch.float32)  # 39 MiB
    assert shard.data_ptr() % huge_pages.HUGE_PAGE == 0 and shard.is_contiguous()
    assert huge_pages.huge_page_bytes(shard) == 0  # nothing touched yet: nothing resident
    shard.fill_(1.0)
    assert huge_pages.huge_page_bytes(shard) >= 32 * MIB
    address = shard.data_ptr()
    view = shard[10:20]
    del shard
    gc.collect()
    assert _mapped(address)  # a view keeps the storage, and the storage keeps the mapping
    del view
    gc.collect()
    assert not _mapped(address)  # the last tensor gone, the mapping is unmapped: nothing kept


def test_existing_memory_is_collapsed_in_place_with_its_values():
    table = torch.randn(160_000, 64)
    before = table.clone()
    address = table.data_ptr()
    if not huge_pages.advise_existing(table):
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux >= 6.1)")
    assert table.data_ptr() == address and torch.equal(table, before)
    assert huge_pages.huge_page_bytes(table) >= 32 * MIB


def test_small_tables_other_devices_and_none_get_no_advice():
    assert not huge_pages.wanted(MIB, 32 * MIB)
    assert not huge_pages.wanted(64 * MIB, None)
    assert not huge_pages.wanted(64 * MIB, 32 * MIB, "meta")
    assert huge_pages.wanted(64 * MIB, 32 * MIB, "cpu")


class _Bags(nn.Module):
    def __init__(self, device="cpu"):
        super().__init__()
        self.big = nn.EmbeddingBag(70_000, 64, mode="sum", device=device)  # 17 MiB
        self.small = nn.EmbeddingBag(1000, 64, mode="sum", device=device)
        self.head = nn.Linear(128, 1)

    def forward(self, ids, offsets):
        return self.head(torch.cat([self.big(ids[0], offsets[0]), self.small(ids[1], offsets[1])], dim=1))


def _inputs():
    g = torch.Generator().manual_seed(0)
    return ([torch.randint(0, 1000, (8,), generator=g) for _ in range(2)], [torch.arange(8)] * 2)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_compile_puts_big_shards_on_huge_pages_and_still_shares_the_model_table(device, tmp_path):
    model = _Bags(device)
    weight = model.big.weight
    before = None if device == "meta" else weight.detach().clone()
    options = sparselift.CompileOptions(plan="none", cache_dir=str(tmp_path), huge_page_min_bytes=16 * MIB)
    compiled = sparselift.compile(model, _inputs(), options=options)
    huge = compiled.local.huge_page_bytes
    assert set(huge) == {"big"} and huge["big"] >= 8 * MIB  # the 0.2 MiB table is left as it is
    assert "huge pages (this rank):" in compiled.plan.explain()
    if device == "cpu":
        assert compiled.local.origin["big"] == "shared"  # collapsed in place, not copied
        assert compiled.tables["big"].data_ptr() == weight.data_ptr() and torch.equal(weight.detach(), before)
    off = sparselift.compile(
        _Bags(device),
        _inputs(),
        options=sparselift.CompileOptions(plan="none", cache_dir=str(tmp_path), huge_page_min_bytes=None),
    )
    assert off.local.huge_page_bytes == {} and "huge pages" not in off.plan.explain()
