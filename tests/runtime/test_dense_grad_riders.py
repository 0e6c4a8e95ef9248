"""Replicated tables' gradients riding in the dense gradients' all-reduce (`with_dense_grads`).

The compiler's default lowering (`CompileOptions.replicated_grads="with-dense"`), like
`aggregate-comm`'s `dense_grad` role on a plan lowered with `replicated_grads="own"`, drops the
replicated tables' own all-reduce: their gradients travel in the dense gradients' one bucket at
the end of backward, and their updates run after it. Where no dense bucket carries them
(overlapped buckets, `dense_sync=False`), they get an all-reduce of their own. Every way must
update the tables exactly as with their own all-reduce.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from parity_models import count_calls, small_kaggle  # tests/runtime is on sys.path

import sparselift
from sparselift.models.registry import build
from sparselift.runtime import collectives as runtime_collectives


def _worker(rank, world, cache, passes, dense_sync, replicated_grads="own"):
    # `replicated_grads=None`: the compiler's default lowering.
    options = {} if replicated_grads is None else {"replicated_grads": replicated_grads}
    compiled = small_kaggle(passes, cache, dense_sync=dense_sync, **options)
    collectives = count_calls(runtime_collectives, "all_reduce_sum_start")  # on whichever transport
    for step in range(3):
        _, batch = build("dlrm-kaggle", rows_cap=5000, batch_size=16, seed=10 * step + rank)
        F.softplus(compiled(*batch)).mean().backward()
    replicated = [f.name for f in compiled.table_facts if f.placement == "data_parallel"]
    return {
        "tables": {n: compiled.tables[n].clone() for n in replicated},
        "all_reduces_per_step": collectives[0] / 3,
        "riders_left": len(compiled.runner.riders),
        "source": compiled.plan.source,
    }


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> list[dict]:
    """Without riders (the replicated tables' own all-reduce): what every way must match."""
    return sparselift.launch(_worker, 2, str(tmp_path_factory.mktemp("own")), "", True, timeout_s=300)


@pytest.mark.parametrize(
    ("passes", "dense_sync", "all_reduces", "replicated_grads"),
    [
        pytest.param("aggregate-comm{roles=dense_grad}", True, 1, "own", id="in-the-dense-bucket"),
        pytest.param("aggregate-comm{roles=dense_grad},hide-latency", True, None, "own", id="overlapped-buckets"),
        pytest.param("aggregate-comm{roles=dense_grad}", False, 1, "own", id="without-dense-sync"),
        pytest.param("", True, 1, None, id="the-default-lowering"),
    ],
)
def test_riders_update_replicated_tables_like_their_own_all_reduce(
    own, tmp_path, passes, dense_sync, all_reduces, replicated_grads
):
    ride = sparselift.launch(_worker, 2, str(tmp_path), passes, dense_sync, replicated_grads, timeout_s=300)
    assert "rt.all_reduce_with_dense_grads" in ride[0]["source"]
    assert "rt.all_reduce_with_dense_grads" not in own[0]["source"]
    # Without riders: the tables' all-reduce, then the dense gradients' one bucket.
    assert own[0]["all_reduces_per_step"] == 2
    if all_reduces is not None:  # one bucket carries them, or (no dense sync) their own
        assert ride[0]["all_reduces_per_step"] == all_reduces
    for r_own, r_ride in zip(own, ride):
        assert r_ride["riders_left"] == 0
        assert r_own["tables"].keys() == r_ride["tables"].keys() and r_own["tables"]
        for name, table in r_own["tables"].items():
            torch.testing.assert_close(r_ride["tables"][name], table, rtol=0, atol=1e-6, msg=name)
