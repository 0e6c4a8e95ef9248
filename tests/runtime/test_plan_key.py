"""The plan key read from the IR: pooling factors enter bucketed, shapes through the value types."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import sparselift
from sparselift.codegen.table_facts import describe_features
from sparselift.models import build
from sparselift.passes.lift_sparse import LiftSparse
from sparselift.passes.plan_candidates import PlanOptions
from sparselift.plan_key import _bucket_pooling, _bucketed_text, _value_types, diff_fields, key_fields, plan_key

MODEL, ROWS, BATCH = "two-tower", 200, 8


def _export(stats=None, batch: int = BATCH, rows: int = ROWS):
    model, inputs = build(MODEL, rows_cap=rows, batch_size=batch)
    return sparselift.export(model, inputs, world_size=2, sharding="table_wise", stats=stats)


def _fields(program):
    return key_fields(program, lift=LiftSparse(), plan_options=PlanOptions(), device="cpu")


@pytest.fixture(scope="module")
def features():
    return [f.name for f in describe_features(_export().module)]


def test_bucketing_is_by_factors_of_sqrt_2():
    assert _bucket_pooling(4.0) == 4.0 and _bucket_pooling(4.3) == 4.0 and _bucket_pooling(5.0) == 5.66
    assert _bucket_pooling(2.9) == 2.83 and _bucket_pooling(0.0) == 0.0


def test_pooling_factors_within_a_bucket_share_the_key_across_buckets_the_ir_differs(features):
    base = _export({f: 4.0 for f in features})
    near = _export({f: 4.3 for f in features})  # the bucket of 4 (3.36 .. 4.76)
    far = _export({features[0]: 6.0, **{f: 4.0 for f in features[1:]}})  # the bucket of 5.66
    assert [f.pooling_factor for f in describe_features(near.module)][0] == pytest.approx(4.3)
    f_base, f_near, f_far = _fields(base), _fields(near), _fields(far)
    assert base.text != near.text  # the printed IRs differ: only the bucketing makes the keys equal
    assert f_base == f_near and plan_key(f_base) == plan_key(f_near)
    assert f_far["ir"] != f_base["ir"] and plan_key(f_far) != plan_key(f_base)
    assert "pooling_factor = 5.66" in _bucketed_text(far.module)
    assert "pooling_factor = 6.0" in far.text  # the program itself keeps the measured factor


def test_the_value_types_are_the_tensor_types_the_printed_ir_names(features):
    program = _export({f: 4.0 for f in features})
    # What the regex over the printed IR found before: the same types, read from the values.
    assert _value_types(program.module) == sorted(set(re.findall(r"tensor<[^>]*>", program.text)))
    assert "tensor<?x16xf32>" in _value_types(program.module)


@pytest.mark.parametrize("change", [{"batch": 2 * BATCH}, {"rows": 2 * ROWS}])
def test_a_changed_shape_misses(features, change):
    stats = {f: 4.0 for f in features}
    a, b = _fields(_export(stats)), _fields(_export(stats, **change))
    assert diff_fields(a, b) == ["shapes", "ir"] and plan_key(a) != plan_key(b)


def test_the_key_is_the_same_in_another_process(features):
    # Stable across runs (and so across ranks): no object ids, set orders or hash seeds in it.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from test_plan_key import _export, _fields\n"
        "from sparselift.plan_key import plan_key\n"
        "print(plan_key(_fields(_export({f: 4.0 for f in sys.argv[2:]}))))\n"
    )
    argv = [sys.executable, "-c", code, str(Path(__file__).parent), *features]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == plan_key(_fields(_export({f: 4.0 for f in features})))


def test_distinct_shares_enter_the_key_to_a_tenth():
    from parity_models import sequence_model  # tests/runtime is on sys.path

    model, inputs = sequence_model(batch_size=8)

    def key_text(shares):
        return _bucketed_text(sparselift.export(model, inputs, world_size=2, distinct=shares).module)

    near, close, far = key_text({"item": 0.41}), key_text({"item": 0.38}), key_text({"item": 0.7})
    assert "distinct = 0.4>" in near and near == close and near != far


def test_a_plan_lowered_another_way_misses(features):
    # A record planned with the replicated gradients' own all-reduce measured other plans than
    # the riding lowering compiles: the lift-sparse options are part of the key.
    program = _export({f: 4.0 for f in features})
    own = key_fields(program, lift=LiftSparse(replicated_grads="own"), plan_options=PlanOptions(), device="cpu")
    ride = key_fields(program, lift=LiftSparse(replicated_grads="with-dense"), plan_options=PlanOptions(), device="cpu")
    changed = diff_fields(own, ride)
    assert len(changed) == 1 and changed[0].startswith("optimizer") and plan_key(own) != plan_key(ride)
