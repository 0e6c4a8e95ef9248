"""One plan hash: explain(), the generated module's header and its file name show the same one."""

from __future__ import annotations

import re

import sparselift
from sparselift.codegen.plan_module import plan_hash
from sparselift.models import build


def _compile(tmp_path, passes: str):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    options = sparselift.CompileOptions(cache_dir=str(tmp_path), plan="none", kernels="reference", passes=passes)
    return sparselift.compile(model, inputs, options=options).plan


def test_explain_and_the_generated_header_show_one_plan_hash(tmp_path):
    plan = _compile(tmp_path, "")
    header = re.search(r"^plan hash: ([0-9a-f]{16})$", plan.source, re.M)
    shown = re.match(r"plan hash: ([0-9a-f]{16}) \((.*)\)$", plan.explain().splitlines()[0])
    assert header and shown, (plan.source[:300], plan.explain()[:300])
    assert header.group(1) == shown.group(1) == plan.hash
    assert f"PLAN_HASH = {plan.hash!r}" in plan.source
    assert shown.group(2) == str(plan.path) and plan.path.name == f"plan_{plan.hash}.py"
    assert plan.hash == plan_hash(plan.program.module)  # the optimized IR's hash
    # Another pipeline is another plan: another hash, everywhere.
    other = _compile(tmp_path, "parallelize-tables{groups=2}")
    assert other.hash != plan.hash and f"plan hash: {other.hash}" in other.source
