"""`sparselift.compile` under torchrun (env://), as a user would launch it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sparselift.runtime.distributed import free_port

SCRIPT = textwrap.dedent(
    """
    import torch, sparselift
    from sparselift.models import build

    rank, world = sparselift.init_from_env(timeout_s=60)
    model, inputs = build("two-tower", rows_cap=100, batch_size=4, seed=0)
    compiled = sparselift.compile(model, inputs, sharding="table_wise")
    before = compiled.table("user.emb.0").clone()
    compiled(*inputs).sum().backward()
    changed = not torch.equal(compiled.table("user.emb.0"), before)
    print(f"rank {rank}/{world} ok changed={changed}", flush=True)
    """
)


def test_compile_and_train_under_torchrun(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run(
        [str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rank 0/2 ok changed=True" in out.stdout and "rank 1/2 ok changed=True" in out.stdout
