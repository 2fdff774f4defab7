"""The machine shapes Vertex accepts, loaded once from machines.json (the emulator's own small data file).

Used to refuse a spec Vertex would refuse: unknown machine types, accelerators a machine type does not take,
and accelerator counts outside what the machine type accepts; and to name the quota metric of a GPU kind.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CATALOG_FILE = Path(__file__).with_name("machines.json")


@dataclass(frozen=True)
class MachineCatalog:
    """accelerators: type -> quota metric suffix. gpu_machines: machine type -> (accelerator type, count).
    n1_memory_per_vcpu: N1 family -> GB per vCPU. n1_gpu_limits: accelerator -> count -> (max vCPU, max GB).
    cpu_pattern: machine types without GPUs that Vertex takes for training."""

    accelerators: dict[str, str]
    gpu_machines: dict[str, tuple[str, int]]
    n1_memory_per_vcpu: dict[str, float]
    n1_vcpus: tuple[int, ...]
    n1_gpu_limits: dict[str, dict[int, tuple[int, int]]]
    cpu_pattern: re.Pattern[str]

    def quota_metric(self, accelerator_type: str, *, preemptible: bool = False) -> str:
        """Full quota metric name for a GPU kind (or CPUs when accelerator_type is empty)."""
        kind = self.accelerators.get(accelerator_type, accelerator_type.lower() + "_gpus") if accelerator_type else ""
        middle = "preemptible_" if preemptible and kind else ""
        suffix = kind or "cpus"
        return f"aiplatform.googleapis.com/custom_model_training_{middle}{suffix}"

    def n1_shape(self, machine_type: str) -> tuple[int, float] | None:
        """(vCPUs, GB of memory) of an N1 machine type, or None when it is not one."""
        match = re.fullmatch(r"n1-(standard|highmem|highcpu)-(\d+)", machine_type)
        if match is None or int(match.group(2)) not in self.n1_vcpus:
            return None
        vcpus = int(match.group(2))
        return vcpus, vcpus * self.n1_memory_per_vcpu[match.group(1)]

    def is_known(self, machine_type: str) -> bool:
        return machine_type in self.gpu_machines or bool(self.cpu_pattern.fullmatch(machine_type))


@cache
def load_catalog(path: Path = CATALOG_FILE) -> MachineCatalog:
    """Read and check machines.json once per process."""
    data = json.loads(path.read_text())
    if data.get("schema_version") != 1:
        raise ValueError(f"{path}: expected schema_version 1, found {data.get('schema_version')!r}.")
    n1 = data["n1"]
    return MachineCatalog(
        accelerators={name: entry["quota_metric"] for name, entry in data["accelerators"].items()},
        gpu_machines={
            name: (entry["accelerator_type"], int(entry["count"])) for name, entry in data["gpu_machine_types"].items()
        },
        n1_memory_per_vcpu={family: float(gb) for family, gb in n1["memory_gb_per_vcpu"].items()},
        n1_vcpus=tuple(n1["vcpus"]),
        n1_gpu_limits={
            accelerator: {int(count): (int(limit[0]), int(limit[1])) for count, limit in limits.items()}
            for accelerator, limits in n1["gpu_limits"].items()
        },
        cpu_pattern=re.compile(data["cpu_machine_type_pattern"]),
    )
