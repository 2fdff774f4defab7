"""The machine catalog: GPU kinds, Vertex machine shapes, prices and modelling assumptions.

Machine shapes, prices and assumptions are read from data/; GPU kinds from schemas/gpus.py (schemas/data/gpus.json,
shared with the trainer's MFU). One loader (`load_catalog`) reads and validates every file and expands N1 hosts x
GPU counts into shapes. A broken file fails with a CatalogError that names the file, the entry and what was
expected. The planner never reads the files itself: it receives a Catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from functions.planning.assumptions import Assumptions, parse_assumptions
from functions.planning.errors import CatalogError
from functions.planning.prices import PriceBook, parse_prices
from functions.planning.throughput import ThroughputError, ThroughputModel, build_throughput_model
from schemas.errors import SchemaError
from schemas.gpus import GB, GpuSpec, parse_gpus, read_gpus_json
from schemas.throughput_points import parse_throughput_points, read_throughput_points_json
from schemas.vocabulary import CONSUMPTION_MODE, CONSUMPTION_MODES


@dataclass(frozen=True)
class MachineShape:
    """One machine shape Vertex accepts: a machine type with a fixed accelerator kind and count (0 for CPU-only)."""

    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    vcpus: int
    memory_gb: float
    network_gbps: float
    """The VM's bandwidth to other VMs (Gbit/s)."""
    regions: tuple[str, ...]
    scale_out: bool
    """Whether the planner may repeat this shape over several nodes."""
    family: str
    cpu_gflops_per_vcpu: float
    """Peak fp32 GFLOP/s per vCPU; used for CPU-only shapes."""
    counts_cpu_quota: bool
    network_note: str = ""
    """Why network_gbps is below the VM's documented bandwidth (a GPUDirect stack a custom job cannot set up)."""

    @property
    def is_cpu_only(self) -> bool:
        return self.accelerator_type is None

    @property
    def gpu_kind(self) -> str:
        """The accelerator type of a GPU shape; ValueError for a CPU-only one (callers check is_cpu_only first)."""
        if self.accelerator_type is None:
            raise ValueError(f"{self.machine_type} is a CPU-only shape: it has no accelerator type")
        return self.accelerator_type

    @property
    def family_name(self) -> str:
        """The machine type without its size suffix: a3-highgpu-8g -> a3-highgpu (consumption rules by family)."""
        return self.machine_type.rsplit("-", 1)[0]

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GB)

    def to_json(self, gpus: Mapping[str, GpuSpec]) -> dict[str, Any]:
        gpu = gpus.get(self.accelerator_type) if self.accelerator_type else None
        return {
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "accelerator_count": self.accelerator_count,
            "gpu_memory_gb": gpu.memory_gb if gpu else None,
            "vcpus": self.vcpus,
            "memory_gb": self.memory_gb,
            "network_gbps": self.network_gbps,
            "regions": list(self.regions),
            "scale_out": self.scale_out,
        }


CONSUMPTION_FILE = "consumption.json"
MODES = CONSUMPTION_MODES
"""The consumption modes a rule says true or false for (vocabulary.CONSUMPTION_MODE_TERMS)."""


@dataclass(frozen=True)
class SalesRule:
    """The modes Google sells one machine type (or family) in, with the pages that say so."""

    modes: frozenset[str]
    """The subset of MODES sold."""
    sources: tuple[str, ...]
    """URLs (with what each page says)."""
    note: str
    region_modes: Mapping[str, frozenset[str]]
    """Region -> the modes sold there, where a page says a region differs."""

    def sold(self, mode: str, region: str | None = None) -> bool:
        return mode in self.region_modes.get(region or "", self.modes)

    def describe(self) -> str:
        """ "Spot or Flex-start only"; "on demand, Spot, Flex-start or a reservation"."""
        sold = [CONSUMPTION_MODE[m].label for m in MODES if m in self.modes]
        if not sold:
            return "not sold"
        text = sold[0] if len(sold) == 1 else ", ".join(sold[:-1]) + " or " + sold[-1]
        return text + (" only" if len(sold) < len(MODES) else "")


@dataclass(frozen=True)
class Consumption:
    """data/consumption.json, validated: rules by exact machine type, then by family, then the default."""

    rules: Mapping[str, SalesRule]
    default: SalesRule
    version: int

    def rule(self, machine_type: str) -> SalesRule:
        return self.rules.get(machine_type) or self.rules.get(machine_type.rsplit("-", 1)[0]) or self.default


def _sales_rule(spec: Any, sources: dict[str, Any], where: str) -> SalesRule:
    if not isinstance(spec, dict):
        raise CatalogError(f"{where}: expected an object, got {type(spec).__name__}")
    modes = frozenset(m for m in MODES if _need(spec, m, bool, where))
    refs = _need(spec, "sources", list, where)
    unknown = [ref for ref in refs if ref not in sources]
    if not refs or unknown:
        raise CatalogError(f"{where}.sources: expected keys of sources ({', '.join(sorted(sources))}), got {refs!r}")
    regions: dict[str, frozenset[str]] = {}
    for region, override in dict(spec.get("regions", {})).items():
        rwhere = f"{where}.regions.{region}"
        if not isinstance(override, dict) or set(override) - set(MODES):
            raise CatalogError(f"{rwhere}: expected an object of {', '.join(MODES)} -> true/false")
        regions[region] = frozenset(m for m in MODES if override.get(m, m in modes))
    return SalesRule(
        modes=modes,
        sources=tuple(str(sources[ref]) for ref in refs),
        note=_need(spec, "note", str, where),
        region_modes=regions,
    )


def parse_consumption(raw: dict[str, Any]) -> Consumption:
    """Validate data/consumption.json; a broken rule fails naming the entry and what was expected."""
    sources = _need(raw, "sources", dict, CONSUMPTION_FILE)
    rules = _need(raw, "rules", dict, CONSUMPTION_FILE)
    return Consumption(
        rules={name: _sales_rule(spec, sources, f"{CONSUMPTION_FILE}: rules.{name}") for name, spec in rules.items()},
        default=_sales_rule(_need(raw, "default", dict, CONSUMPTION_FILE), sources, f"{CONSUMPTION_FILE}: default"),
        version=int(_need(raw, "version", int, CONSUMPTION_FILE)),
    )


@dataclass(frozen=True)
class Catalog:
    """Everything the planner knows about hardware and prices, validated."""

    gpus: Mapping[str, GpuSpec]
    """accelerator_type -> GpuSpec (schemas/gpus.py)."""
    shapes: tuple[MachineShape, ...]
    regions: tuple[str, ...]
    prices: PriceBook
    assumptions: Assumptions
    fingerprint: str
    """Versions of the data files; changes whenever a file's version changes."""
    consumption: Consumption
    """How Google sells each shape (data/consumption.json)."""
    throughput: ThroughputModel
    """Achieved MFU per GPU kind against the work per step, fitted to schemas/data/throughput_points.json."""


def _read(name: str) -> dict[str, Any]:
    text = resources.files("functions.planning").joinpath(f"data/{name}").read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"data/{name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CatalogError(f"data/{name}: expected a JSON object at the top, got {type(data).__name__}")
    return data


def _need(mapping: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in mapping:
        raise CatalogError(f"{where}: missing field {key!r}")
    value = mapping[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise CatalogError(f"{where}.{key}: expected {expected}, got {type(value).__name__} {value!r}")
    return value


def _positive(mapping: dict[str, Any], key: str, where: str) -> float:
    value = _need(mapping, key, (int, float), where)
    if value <= 0:
        raise CatalogError(f"{where}.{key}: expected a positive number, got {value!r}")
    return value if isinstance(value, int) else float(value)


def _regions(spec: dict[str, Any], sets: dict[str, list[str]], where: str) -> tuple[str, ...]:
    name = _need(spec, "regions", str, where)
    if name not in sets:
        raise CatalogError(f"{where}.regions: unknown region set {name!r}; known: {', '.join(sorted(sets))}")
    return tuple(sets[name])


def _parse_shapes(raw: dict[str, Any], gpus: Mapping[str, GpuSpec]) -> list[MachineShape]:
    sets = _need(raw, "region_sets", dict, "machines.json")
    shapes: list[MachineShape] = []
    for i, spec in enumerate(_need(raw, "fixed_shapes", list, "machines.json")):
        where = f"machines.json: fixed_shapes[{i}]"
        accelerator = _need(spec, "accelerator_type", str, where)
        if accelerator not in gpus:
            raise CatalogError(f"{where}.accelerator_type: {accelerator!r} is not in gpus.json")
        count = _need(spec, "accelerator_count", int, where)
        if count < 1:
            raise CatalogError(f"{where}.accelerator_count: expected >= 1, got {count}")
        machine_type = _need(spec, "machine_type", str, where)
        shapes.append(
            MachineShape(
                machine_type=machine_type,
                accelerator_type=accelerator,
                accelerator_count=count,
                vcpus=int(_positive(spec, "vcpus", where)),
                memory_gb=_positive(spec, "memory_gb", where),
                network_gbps=_positive(spec, "network_gbps", where),
                regions=_regions(spec, sets, where),
                scale_out=_need(spec, "scale_out", bool, where),
                family=machine_type.split("-")[0],
                cpu_gflops_per_vcpu=0.0,
                counts_cpu_quota=False,
            )
        )
    hosts = _need(raw, "n1_hosts", list, "machines.json")
    for name, spec in _need(raw, "n1_gpus", dict, "machines.json").items():
        where = f"machines.json: n1_gpus.{name}"
        if name not in gpus:
            raise CatalogError(f"{where}: {name!r} is not in gpus.json")
        regions = _regions(spec, sets, where)
        counts = {int(k): v for k, v in _need(spec, "counts", dict, where).items()}
        largest = max(counts)
        for count, limit in sorted(counts.items()):
            max_vcpus = _positive(limit, "max_vcpus", f"{where}.counts.{count}")
            max_memory = _positive(limit, "max_memory_gb", f"{where}.counts.{count}")
            network = _positive(limit, "network_gbps", f"{where}.counts.{count}")
            for j, host in enumerate(hosts):
                hwhere = f"machines.json: n1_hosts[{j}]"
                vcpus = int(_positive(host, "vcpus", hwhere))
                memory = _positive(host, "memory_gb", hwhere)
                if vcpus > max_vcpus or memory > max_memory:
                    continue
                shapes.append(
                    MachineShape(
                        machine_type=_need(host, "machine_type", str, hwhere),
                        accelerator_type=name,
                        accelerator_count=count,
                        vcpus=vcpus,
                        memory_gb=memory,
                        network_gbps=network,
                        regions=regions,
                        scale_out=count == largest,
                        family="n1",
                        cpu_gflops_per_vcpu=0.0,
                        counts_cpu_quota=True,
                    )
                )
    families = _need(raw, "cpu_families", dict, "machines.json")
    for i, spec in enumerate(_need(raw, "cpu_shapes", list, "machines.json")):
        where = f"machines.json: cpu_shapes[{i}]"
        family = _need(spec, "family", str, where)
        if family not in families:
            raise CatalogError(f"{where}.family: unknown family {family!r}; known: {', '.join(sorted(families))}")
        fspec, fwhere = families[family], f"machines.json: cpu_families.{family}"
        shapes.append(
            MachineShape(
                machine_type=_need(spec, "machine_type", str, where),
                accelerator_type=None,
                accelerator_count=0,
                vcpus=int(_positive(spec, "vcpus", where)),
                memory_gb=_positive(spec, "memory_gb", where),
                network_gbps=min(
                    _positive(fspec, "network_gbps_per_vcpu", fwhere) * spec["vcpus"],
                    _positive(fspec, "max_network_gbps", fwhere),
                ),
                regions=_regions(fspec, sets, f"cpu_families.{family}"),
                scale_out=False,
                family=family,
                cpu_gflops_per_vcpu=_positive(fspec, "gflops_per_vcpu", fwhere),
                counts_cpu_quota=True,
            )
        )
    shapes = _gpudirect(raw, shapes)
    seen: set[tuple[str, str | None, int]] = set()
    for shape in shapes:
        key = (shape.machine_type, shape.accelerator_type, shape.accelerator_count)
        if key in seen:
            raise CatalogError(f"machines.json: shape {key} is listed twice")
        seen.add(key)
    return shapes


def _gpudirect(raw: dict, shapes: list[MachineShape]) -> list[MachineShape]:
    """Shapes whose GPUDirect stack a Vertex custom job cannot set up, at the bandwidth a custom job gets."""
    where = "machines.json: gpudirect"
    table = _need(raw, "gpudirect", dict, "machines.json")
    plain = _positive(table, "custom_job_gbps", where)
    entries = _need(table, "shapes", dict, where)
    known = {s.machine_type for s in shapes}
    stray = sorted(set(entries) - known)
    if stray:
        raise CatalogError(f"{where}.shapes: {', '.join(stray)} are not machine shapes in fixed_shapes")
    out = []
    for shape in shapes:
        entry = entries.get(shape.machine_type)
        if entry is not None:
            ewhere = f"{where}.shapes.{shape.machine_type}"
            stack, needs = _need(entry, "stack", str, ewhere), _need(entry, "needs", str, ewhere)
            if not _need(entry, "custom_job", bool, ewhere) and plain < shape.network_gbps:
                note = (
                    f"network: {shape.machine_type} across machines at {plain:g} Gbps (its primary NIC), not "
                    f"{stack}'s {shape.network_gbps:g} Gbps: {stack} needs {needs}, which a Vertex custom job "
                    "cannot attach (docs/deploy.md, GPUDirect)"
                )
                shape = replace(shape, network_gbps=plain, network_note=note)
        out.append(shape)
    return out


def build_catalog(
    gpus_raw: dict,
    machines_raw: dict,
    prices_raw: dict,
    assumptions_raw: dict,
    consumption_raw: dict | None = None,
    points_raw: dict | None = None,
) -> Catalog:
    """Validate raw file contents into a Catalog (tests feed altered copies through here); consumption_raw None =
    the packaged data/consumption.json, points_raw None = the packaged schemas/data/throughput_points.json."""
    try:
        gpus = parse_gpus(gpus_raw).kinds
    except SchemaError as exc:
        raise CatalogError(str(exc)) from exc
    shapes = _parse_shapes(machines_raw, gpus)
    regions = tuple(_need(machines_raw, "region_sets", dict, "machines.json").get("all", ()))
    if not regions:
        raise CatalogError("machines.json: region_sets.all must list every region")
    for shape in shapes:
        stray = set(shape.regions) - set(regions)
        if stray:
            raise CatalogError(
                f"machines.json: {shape.machine_type} names regions {sorted(stray)} not in region_sets.all"
            )
    prices = parse_prices(prices_raw, regions)
    items = {s.machine_type for s in shapes} | set(gpus)
    missing = sorted(items - set(prices.items))
    if missing:
        raise CatalogError(f"prices.json: no price for {', '.join(missing)}; add them under items")
    assumptions = parse_assumptions(assumptions_raw)
    if assumptions.reduction_server.machine_type not in prices.items:
        raise CatalogError(
            f"prices.json: no price for the Reduction Server machine {assumptions.reduction_server.machine_type!r}"
        )
    consumption = parse_consumption(_read(CONSUMPTION_FILE) if consumption_raw is None else consumption_raw)
    stray_rules = sorted(
        name for name in consumption.rules if not any(name in (s.machine_type, s.family_name) for s in shapes)
    )
    if stray_rules:
        raise CatalogError(f"{CONSUMPTION_FILE}: rules name no machine type or family of the catalog: {stray_rules}")
    try:
        points = parse_throughput_points(read_throughput_points_json() if points_raw is None else points_raw, gpus)
        throughput = build_throughput_model(gpus, points, assumptions.compute.gpu_step_overhead_seconds)
    except (SchemaError, ThroughputError) as exc:
        raise CatalogError(str(exc)) from exc
    raws = (gpus_raw, machines_raw, prices_raw, assumptions_raw)
    fingerprint = "-".join(str(raw.get("version", "?")) for raw in raws) + f"-c{consumption.version}-t{points.version}"
    return Catalog(
        gpus=gpus,
        shapes=tuple(shapes),
        regions=regions,
        prices=prices,
        assumptions=assumptions,
        fingerprint=fingerprint,
        consumption=consumption,
        throughput=throughput,
    )


@cache
def load_catalog() -> Catalog:
    """The packaged catalog, read and validated once per process."""
    return build_catalog(read_gpus_json(), _read("machines.json"), _read("prices.json"), _read("assumptions.json"))
