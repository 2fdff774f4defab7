"""What a Vertex AI CustomJob must carry by machine family, region and scheduling strategy, from data/vertex_jobs.json.

Read by the planner (which GPU kinds may wait for capacity under FLEX_START, the boot disk a machine takes) and by
the dispatcher's CustomJob builder (the Reduction Server image nearest the job's region). One file, one loader:
`load_vertex_jobs`; a malformed file fails with a SchemaError naming the field. Each section of the file names the
documentation page it was read from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from schemas.errors import SchemaError
from schemas.fields import Reader

VERTEX_JOBS_FILE = "vertex_jobs.json"
"""In schemas/data/."""
DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
"""DiskSpec.boot_disk_type's valid values (API reference)."""


@dataclass(frozen=True)
class BootDisk:
    type: str
    """One of DISK_TYPES."""
    size_gb: int
    why: str = ""
    """Why this family takes this disk ("" for the default)."""


@dataclass(frozen=True)
class VertexJobRules:
    """The rules, validated."""

    version: int
    default_disk: BootDisk
    family_disks: Mapping[str, BootDisk]
    """Machine family (the machine type without its size suffix, e.g. "a3-ultragpu") -> its boot disk."""
    reduction_server_images: Mapping[str, str]
    """Docker multi-region ("us", "europe", "asia") -> the Reduction Server image published there."""
    region_prefixes: Mapping[str, tuple[str, ...]]
    """Docker multi-region -> the region name prefixes it serves."""
    default_timeout_seconds: int
    """Vertex's scheduling.timeout when none is set."""
    restart_multi_node: bool
    flex_start_kinds: tuple[str, ...]
    """Accelerator types a FLEX_START job may request."""
    flex_max_timeout_seconds: int
    flex_default_max_wait_seconds: int

    @staticmethod
    def family(machine_type: str) -> str:
        """`a3-ultragpu-8g` -> `a3-ultragpu`; `n1-standard-8` -> `n1-standard`."""
        return machine_type.rsplit("-", 1)[0]

    def boot_disk(self, machine_type: str) -> BootDisk:
        return self.family_disks.get(self.family(machine_type), self.default_disk)

    def multi_region(self, region: str) -> str:
        """The Docker multi-region nearest region; ValueError naming the known prefixes when none matches."""
        for name, prefixes in self.region_prefixes.items():
            if region.startswith(prefixes):
                return name
        known = ", ".join(p for prefixes in self.region_prefixes.values() for p in prefixes)
        raise ValueError(
            f"region {region!r} matches no Reduction Server multi-region (prefixes: {known}); "
            f"add it under reduction_server.region_prefixes in schemas/data/{VERTEX_JOBS_FILE}"
        )

    def reduction_server_image(self, region: str) -> str:
        return self.reduction_server_images[self.multi_region(region)]

    def flex_start_offered(self, accelerator_type: str | None) -> bool:
        return accelerator_type is not None and accelerator_type in self.flex_start_kinds


def _disk(r: Reader) -> BootDisk:
    return BootDisk(
        type=r.string("type", choices=DISK_TYPES), size_gb=r.integer("size_gb", minimum=10), why=r.string("why", "")
    )


def parse_vertex_jobs(raw: object) -> VertexJobRules:
    """Validate the contents of vertex_jobs.json; errors start "vertex_jobs.json: "."""
    try:
        r = Reader(raw)
        disks = r.obj("boot_disks")
        families = disks.obj("families")
        rs = r.obj("reduction_server")
        images = rs.obj("images")
        prefixes = rs.obj("region_prefixes")
        if set(images.data) != set(prefixes.data):
            raise SchemaError(
                f"images name {sorted(images.data)} but region_prefixes name {sorted(prefixes.data)}",
                field="reduction_server",
            )
        scheduling = r.obj("scheduling")
        flex = r.obj("flex_start")
        return VertexJobRules(
            version=r.integer("version", minimum=1),
            default_disk=_disk(disks.obj("default")),
            family_disks=MappingProxyType({name: _disk(families.obj(name)) for name in families.data}),
            reduction_server_images=MappingProxyType({name: images.string(name) for name in images.data}),
            region_prefixes=MappingProxyType({name: prefixes.strings(name) for name in prefixes.data}),
            default_timeout_seconds=scheduling.integer("default_timeout_seconds", minimum=1),
            restart_multi_node=scheduling.boolean("restart_job_on_worker_restart_when_multi_node"),
            flex_start_kinds=flex.strings("accelerator_types"),
            flex_max_timeout_seconds=flex.integer("max_timeout_seconds", minimum=1),
            flex_default_max_wait_seconds=flex.integer("default_max_wait_seconds", minimum=1),
        )
    except SchemaError as exc:
        raise SchemaError(f"{VERTEX_JOBS_FILE}: {exc}") from exc


@cache
def load_vertex_jobs() -> VertexJobRules:
    """The packaged rules, read and validated once per process."""
    text = resources.files("schemas").joinpath("data", VERTEX_JOBS_FILE).read_text()
    try:
        return parse_vertex_jobs(json.loads(text))
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{VERTEX_JOBS_FILE} is not valid JSON: {exc}") from exc


__all__ = ["DISK_TYPES", "BootDisk", "VertexJobRules", "load_vertex_jobs", "parse_vertex_jobs"]
