"""GPU kinds: datasheet peaks, memory and links, loaded from data/gpus.json; shared by the planner and the trainer.

The planner's catalog (functions/planning/catalog.py) plans with these figures; the trainer (trainer/metrics.py)
divides its measured FLOP/s by the same peaks to report MFU. One file, one loader: `load_gpus`. A malformed file
fails with a SchemaError naming the GPU kind and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from functools import cache
from types import MappingProxyType
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.json_text import packaged_object
from schemas.vocabulary import FP32, PRECISIONS

GB = 1_000_000_000
GPUS_FILE = "gpus.json"
"""In schemas/data/."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU kind, keyed by its Vertex accelerator_type."""

    accelerator_type: str
    display: str
    """Short name people use ("H100 80GB"); its first word is the model ("H100") that torch's device name carries."""
    memory_gb: float
    """GB = 1e9 bytes."""
    memory_bandwidth_gbytes_per_s: float
    peak_tflops: Mapping[str, float | None]
    """precision (vocabulary.PRECISIONS) -> dense peak TFLOP/s, or None where the kind has no such math."""
    nvlink_gbytes_per_s: float
    """Per direction inside a VM; 0 when the GPUs only share PCIe."""
    pcie_gbytes_per_s: float
    assumed_mfu: float
    """The literature's model-FLOPs utilisation for this kind, in (0, 1]; the planner uses its ratio between kinds
    to scale measured MFU into a prior for a kind nobody measured (functions/planning/throughput.py)."""
    end_of_support: date | None
    compute_capability: str = ""
    """CUDA compute capability "X.Y" (sm_XY): which trainer image carries kernels for it (runs_on)."""

    @property
    def model(self) -> str:
        """The model token ("H100", "T4", "A100") as it appears among the words of torch's device name."""
        return self.display.split()[0]

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GB)

    @property
    def supports_bf16(self) -> bool:
        return self.peak_tflops.get("bf16") is not None

    @property
    def intra_node_gbytes_per_s(self) -> float:
        return self.nvlink_gbytes_per_s or self.pcie_gbytes_per_s

    def mixed_precision(self) -> str:
        """The format training uses on this kind: the first of vocabulary.PRECISIONS it has math for."""
        return next((p for p in PRECISIONS if self.peak_tflops.get(p) is not None), FP32)

    def peak_flops(self, precision: str) -> float:
        tflops = self.peak_tflops.get(precision)
        if tflops is None:
            raise ValueError(f"{self.display} has no {precision} math")
        return float(tflops) * 1e12


@dataclass(frozen=True)
class GpuTable:
    """Every GPU kind in gpus.json, validated."""

    version: int
    """Bumped whenever a figure changes (part of the planner catalog's fingerprint)."""
    kinds: Mapping[str, GpuSpec]
    """accelerator_type -> GpuSpec, in file order."""


def _positive(r: Reader, key: str) -> float:
    """The number at key as written (16 stays an int, so tables print it as the file says); it must be > 0."""
    number = r.number(key)
    if number <= 0:
        raise SchemaError(f"expected a positive number, got {r.data[key]!r}", field=f"{r.path}.{key}")
    written = r.data[key]
    return written if isinstance(written, int) else number


def _peaks(r: Reader) -> Mapping[str, float | None]:
    peaks = r.obj("peak_tflops")
    if set(peaks.data) != set(PRECISIONS):
        raise SchemaError(f"expected keys {PRECISIONS}, got {sorted(peaks.data)}", field=peaks.path)
    if peaks.data[FP32] is None:
        raise SchemaError("every GPU needs an fp32 figure", field=f"{peaks.path}.{FP32}")
    return MappingProxyType({p: None if peaks.data[p] is None else _positive(peaks, p) for p in PRECISIONS})


def _gpu(name: str, r: Reader) -> GpuSpec:
    mfu = _positive(r, "assumed_mfu")
    if mfu > 1:
        raise SchemaError(f"expected a fraction in (0, 1], got {mfu}", field=f"{r.path}.assumed_mfu")
    eos = r.data.get("end_of_support")
    try:
        end_of_support = date.fromisoformat(eos) if eos else None
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"expected YYYY-MM-DD or null, got {eos!r}", field=f"{r.path}.end_of_support") from exc
    return GpuSpec(
        accelerator_type=name,
        display=r.string("display"),
        memory_gb=_positive(r, "memory_gb"),
        memory_bandwidth_gbytes_per_s=_positive(r, "memory_bandwidth_gbytes_per_s"),
        peak_tflops=_peaks(r),
        nvlink_gbytes_per_s=float(r.number("nvlink_gbytes_per_s", minimum=0.0)),
        pcie_gbytes_per_s=_positive(r, "pcie_gbytes_per_s"),
        assumed_mfu=mfu,
        end_of_support=end_of_support,
        compute_capability=_capability(r),
    )


_CAPABILITY = re.compile(r"^[1-9][0-9]?\.[0-9]$")


def _capability(r: Reader) -> str:
    value = r.string("compute_capability")
    if not _CAPABILITY.match(value):
        raise SchemaError(
            f"expected a CUDA compute capability such as '9.0', got {value!r}", field=f"{r.path}.compute_capability"
        )
    return value


def parse_capability(value: object, field: str) -> tuple[int, int]:
    """ "X.Y" -> (X, Y); SchemaError naming field otherwise."""
    if not isinstance(value, str) or not _CAPABILITY.match(value):
        raise SchemaError(f"expected a CUDA compute capability such as '9.0' (sm_90), got {value!r}", field=field)
    major, minor = value.split(".")
    return int(major), int(minor)


def runs_on(gpu_capability: str, carried: Iterable[str]) -> bool:
    """Whether code built with kernels for the `carried` capabilities runs on a GPU of `gpu_capability`: a kernel
    built for X.Y runs on X.Z for Z >= Y (CUDA binary compatibility within a major version), never across majors."""
    major, minor = (int(part) for part in gpu_capability.split("."))
    return any(int(c.split(".")[0]) == major and int(c.split(".")[1]) <= minor for c in carried)


def sm_name(capability: str) -> str:
    """ "10.0" -> "sm_100"."""
    return "sm_" + capability.replace(".", "")


def parse_gpus(raw: object) -> GpuTable:
    """Validate the contents of gpus.json (tests feed altered copies through here); errors start "gpus.json: "."""
    try:
        r = Reader(raw)
        gpus = r.obj("gpus")
        kinds = {name: _gpu(name, gpus.obj(name)) for name in gpus.data}
        if not kinds:
            raise SchemaError("lists no GPU kind", field="gpus")
        return GpuTable(version=r.integer("version", minimum=1), kinds=MappingProxyType(kinds))
    except SchemaError as exc:
        raise SchemaError(f"{GPUS_FILE}: {exc}") from exc


def read_gpus_json() -> dict[str, Any]:
    """The packaged schemas/data/gpus.json as plain JSON."""
    return packaged_object(GPUS_FILE)


@cache
def load_gpus() -> GpuTable:
    """The packaged GPU table, read and validated once per process."""
    return parse_gpus(read_gpus_json())
