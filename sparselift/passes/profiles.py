"""Hardware profiles: the machine numbers `annotate-cost` and `simulate` turn bytes,
lookups and FLOPs into microseconds.

A profile is a frozen `HardwareProfile`. The built-ins are `cpu-gloo`, `h100-nccl` and
`h200-nccl`; `load_profile` also reads a JSON object with the same field names (missing fields
take their `cpu-gloo` value, an unknown field is an error). `docs/profiles.md` documents every
field and where the built-in numbers come from.

Units: bandwidths in GB/s (1e9 bytes per second), times in microseconds, `flops_per_s` in
floating-point operations per second.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs

_US_PER_S = 1e6


def _positive(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"hardware profile field '{attribute.name}' must be a positive number, got {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"hardware profile field '{attribute.name}' must be a non-negative number, got {value!r}")


def _positive_int(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"hardware profile field '{attribute.name}' must be a positive integer, got {value!r}")


def _name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"hardware profile field 'name' must be a non-empty string, got {value!r}")


@attrs.frozen
class HardwareProfile:
    """The numbers of one machine kind (per rank: one process, one device or core).

    - `name`: the profile's name (a built-in name, or what the JSON file says).
    - `mem_bw_gbps`: bandwidth of random-row gathers (embedding lookups): gathered row bytes per
      second. Far below streaming bandwidth when rows are small (latency-bound).
    - `copy_bw_gbps`: streaming copy bandwidth, counted STREAM-style (bytes read + bytes
      written), so copying `n` bytes costs `2 n / copy_bw`.
    - `flops_per_s`: achieved FLOP rate of the dense regions (MLPs, interaction).
    - `lookup_overhead_us`: fixed cost of one lookup / update op besides its gathers (bag
      setup, offsets, dispatch of the table kernel).
    - `kernel_launch_us`: fixed cost of dispatching any op (pack, unpack, route, dense, ...).
    - `update_factor`: cost of a fused backward + optimizer update relative to the forward
      gather of the same rows (read the row, read the gradient, write the row back: 2-3x).
    - `coll_alpha_us`: fixed latency of one collective call.
    - `coll_peer_alpha_us`: extra latency per peer a rank exchanges messages with.
    - `net_bw_gbps`: point-to-point bandwidth between ranks of one node (per direction).
    - `inter_node_bw_gbps`: point-to-point bandwidth between ranks of different nodes.
    - `ranks_per_node`: consecutive ranks `[k * n, (k + 1) * n)` share node `k`.
    - `reference_op_us`: what one per-table op of the reference lowering (torch ops, the CPU
      path without generated kernels) costs besides its launch: its torch dispatches.
    - `reference_lookup_ns`, `reference_update_ns`: its per-id passes (bag geometry, masks,
      scales) per id, in a lookup and in an update; `reference_byte_ns`: its row passes (scale,
      scatter) per gathered byte. All 0 where the per-table ops are kernels themselves (CUDA:
      Triton per-table kernels).
    """

    name: str = attrs.field(validator=_name)
    mem_bw_gbps: float = attrs.field(validator=_positive)
    copy_bw_gbps: float = attrs.field(validator=_positive)
    flops_per_s: float = attrs.field(validator=_positive)
    lookup_overhead_us: float = attrs.field(validator=_non_negative)
    kernel_launch_us: float = attrs.field(validator=_non_negative)
    update_factor: float = attrs.field(validator=_positive)
    coll_alpha_us: float = attrs.field(validator=_non_negative)
    coll_peer_alpha_us: float = attrs.field(validator=_non_negative)
    net_bw_gbps: float = attrs.field(validator=_positive)
    inter_node_bw_gbps: float = attrs.field(validator=_positive)
    ranks_per_node: int = attrs.field(validator=_positive_int)
    reference_op_us: float = attrs.field(default=0.0, validator=_non_negative)
    reference_lookup_ns: float = attrs.field(default=0.0, validator=_non_negative)
    reference_update_ns: float = attrs.field(default=0.0, validator=_non_negative)
    reference_byte_ns: float = attrs.field(default=0.0, validator=_non_negative)

    # -- derived numbers --------------------------------------------------------------------
    def gather_us(self, nbytes: float) -> float:
        """Time to gather `nbytes` of randomly placed rows."""
        return nbytes / (self.mem_bw_gbps * 1e9) * _US_PER_S

    def copy_us(self, nbytes: float) -> float:
        """Time to copy `nbytes` (read once and written once)."""
        return 2 * nbytes / (self.copy_bw_gbps * 1e9) * _US_PER_S

    def flops_us(self, flops: float) -> float:
        return flops / self.flops_per_s * _US_PER_S

    def same_node(self, a: int, b: int) -> bool:
        return a // self.ranks_per_node == b // self.ranks_per_node

    def beta_us_per_byte(self, src: int, dst: int) -> float:
        """Microseconds per byte sent from rank `src` to rank `dst`."""
        bw = self.net_bw_gbps if self.same_node(src, dst) else self.inter_node_bw_gbps
        return _US_PER_S / (bw * 1e9)

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(
        cls,
        data: Any,
        where: str = "hardware profile",
        default_name: str = "custom",
        base: HardwareProfile | None = None,
    ) -> HardwareProfile:
        """A profile from a mapping of field names; missing fields take their value in `base`
        (default `cpu-gloo`)."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object of profile fields, got {type(data).__name__}")
        known = {f.name for f in attrs.fields(cls)}
        for key in data:
            if key not in known:
                raise ValueError(f"{where}: unknown field '{key}'; known fields: {', '.join(sorted(known))}")
        values = (base or CPU_GLOO).to_dict() | data
        if "name" not in data:
            values["name"] = base.name if base is not None else default_name
        if isinstance(values["ranks_per_node"], float) and values["ranks_per_node"].is_integer():
            values["ranks_per_node"] = int(values["ranks_per_node"])
        try:
            return cls(**values)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}: {e}") from None


# Built-in profiles. Sources and assumptions are in docs/profiles.md; in short:
CPU_GLOO = HardwareProfile(
    # The project's machine kind: 2 cores, one core per rank, gloo over loopback TCP.
    name="cpu-gloo",
    # FBGEMM TBE forward: 4 tables x 100k x 64 (f32), ~326k ids in ~10 ms on one thread, i.e.
    # ~8 GB/s of 256-byte rows; 64-byte rows are more latency-bound: ~6 GB/s.
    mem_bw_gbps=6.0,
    # STREAM-like copy ~18 GB/s (read + write).
    copy_bw_gbps=18.0,
    # TorchRec DLRM Kaggle dense part (~3 MFLOP per sample fwd+bwd, batch 2048) in ~133 ms.
    flops_per_s=45e9,
    lookup_overhead_us=15.0,
    kernel_launch_us=5.0,
    # TBE forward ~10 ms vs forward + backward with fused SGD ~31 ms: backward ~2.1x.
    update_factor=2.1,
    # gloo over loopback TCP: tens of microseconds per call and per peer, a few GB/s.
    coll_alpha_us=50.0,
    coll_peer_alpha_us=20.0,
    net_bw_gbps=3.0,
    inter_node_bw_gbps=1.25,  # 10 GbE, should ranks ever span hosts
    ranks_per_node=8,
    # `sparselift bench reference-ops` on this machine (one thread, two runs averaged): the
    # reference lowering's torch ops are ~100 us a call and ~5x the gather bandwidth's time a row.
    reference_op_us=85.0,
    reference_lookup_ns=115.0,
    reference_update_ns=115.0,
    reference_byte_ns=0.77,
)

CPU_SHM = attrs.evolve(
    CPU_GLOO,
    # The same machine kind with the all-to-alls through shared memory (runtime/shm_transport.py):
    # measured by `bench/shm_profile.py` (2 ranks, one thread each; docs/profiles.md): an 8-byte
    # all-to-all 35 us (gloo: 370), one way 5.7 GB/s (gloo: 3.5). The 35 us split as gloo's is.
    name="cpu-shm",
    coll_alpha_us=25.0,
    coll_peer_alpha_us=10.0,
    net_bw_gbps=5.5,
)

H100_NCCL = HardwareProfile(
    # H100 SXM5 80 GB (HBM3, 3.35 TB/s), 8 per node on NVLink 4 / NVSwitch, NDR InfiniBand.
    name="h100-nccl",
    mem_bw_gbps=1500.0,  # random 64-256 B row gathers reach ~45% of peak HBM
    copy_bw_gbps=2600.0,  # device-to-device copy, read + write counted
    flops_per_s=100e12,  # achieved on MLP GEMMs with TF32/bf16 tensor cores (peak ~495/989 T)
    lookup_overhead_us=8.0,
    kernel_launch_us=5.0,
    update_factor=2.0,
    coll_alpha_us=15.0,  # NCCL launch + sync for a small all-to-all within a node
    coll_peer_alpha_us=1.0,
    net_bw_gbps=350.0,  # NVLink 4: 450 GB/s per direction peak, ~350 achieved by NCCL
    inter_node_bw_gbps=40.0,  # one 400 Gb/s NDR HCA per GPU (50 GB/s), ~40 achieved
    ranks_per_node=8,
)

H200_NCCL = attrs.evolve(
    H100_NCCL,
    # Same GH100 compute and NVLink 4 as the H100; HBM3e at 4.8 TB/s (1.43x).
    name="h200-nccl",
    mem_bw_gbps=2150.0,
    copy_bw_gbps=3700.0,
)

BUILTIN_PROFILES: dict[str, HardwareProfile] = {p.name: p for p in (CPU_GLOO, CPU_SHM, H100_NCCL, H200_NCCL)}


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A built-in profile by name, or one read from a JSON file.

    Raises `ValueError` with a message naming the problem: an unknown name that is not a file,
    a file that is not valid JSON, an unknown field, or a bad value.
    """
    key = str(name_or_path)
    if key in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[key]
    path = Path(key)
    if not path.is_file():
        raise ValueError(
            f"unknown hardware profile '{key}': not a built-in ({', '.join(BUILTIN_PROFILES)}) and not a JSON file"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"hardware profile {key}: cannot read it: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"hardware profile {key}: not valid JSON: {e}") from None
    return HardwareProfile.from_dict(data, where=f"hardware profile {key}", default_name=path.stem)


__all__ = ["HardwareProfile", "CPU_GLOO", "CPU_SHM", "H100_NCCL", "H200_NCCL", "BUILTIN_PROFILES", "load_profile"]
