"""Per-region quota limits (data/quotas.json, or overrides from the dispatcher's configuration)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from functions.planning.errors import CatalogError


@dataclass(frozen=True)
class QuotaTable:
    """GPU and vCPU limits per region. Hashable, so the planner can cache work per table."""

    default_cpus: int
    default_gpus_on_demand: int
    default_gpus_preemptible: int
    cpus: tuple[tuple[str, int], ...] = ()
    """(region, vCPU limit)."""
    gpus: tuple[tuple[str, str, bool, int], ...] = ()
    """(region, accelerator_type, preemptible, limit)."""

    def cpu_limit(self, region: str) -> int:
        return dict(self.cpus).get(region, self.default_cpus)

    def gpu_limit(self, region: str, accelerator_type: str, preemptible: bool) -> int:
        for r, kind, pre, limit in self.gpus:
            if r == region and kind == accelerator_type and pre == preemptible:
                return limit
        return self.default_gpus_preemptible if preemptible else self.default_gpus_on_demand

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> QuotaTable:
        """Apply {"us-central1": {"cpus": 96, "gpus": {"NVIDIA_L4": {"on_demand": 8, "preemptible": 0}}}}."""
        parsed = parse_quotas(
            {
                "default": {
                    "cpus": self.default_cpus,
                    "gpus": {"on_demand": self.default_gpus_on_demand, "preemptible": self.default_gpus_preemptible},
                },
                "regions": {k: dict(v) for k, v in overrides.items()},
            },
            where="quota overrides",
        )
        cpus = {**dict(self.cpus), **dict(parsed.cpus)}
        gpus = {(r, k, p): lim for r, k, p, lim in self.gpus}
        gpus.update({(r, k, p): lim for r, k, p, lim in parsed.gpus})
        return replace(
            self,
            cpus=tuple(sorted(cpus.items())),
            gpus=tuple(sorted((r, k, p, lim) for (r, k, p), lim in gpus.items())),
        )


def _limit(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CatalogError(f"{where}: expected a whole number >= 0, got {value!r}")
    return value


def parse_quotas(raw: dict[str, Any], where: str = "quotas.json") -> QuotaTable:
    default = raw.get("default")
    if not isinstance(default, dict) or not isinstance(default.get("gpus"), dict):
        raise CatalogError(f"{where}: missing default {{cpus, gpus: {{on_demand, preemptible}}}}")
    cpus: list[tuple[str, int]] = []
    gpus: list[tuple[str, str, bool, int]] = []
    for region, spec in (raw.get("regions") or {}).items():
        if not isinstance(spec, dict):
            raise CatalogError(f"{where}: regions.{region}: expected an object with cpus and/or gpus")
        if "cpus" in spec:
            cpus.append((region, _limit(spec["cpus"], f"{where}: regions.{region}.cpus")))
        for kind, limits in (spec.get("gpus") or {}).items():
            for key, preemptible in (("on_demand", False), ("preemptible", True)):
                if key in limits:
                    gpus.append(
                        (region, kind, preemptible, _limit(limits[key], f"{where}: regions.{region}.gpus.{kind}.{key}"))
                    )
    return QuotaTable(
        default_cpus=_limit(default.get("cpus"), f"{where}: default.cpus"),
        default_gpus_on_demand=_limit(default["gpus"].get("on_demand"), f"{where}: default.gpus.on_demand"),
        default_gpus_preemptible=_limit(default["gpus"].get("preemptible"), f"{where}: default.gpus.preemptible"),
        cpus=tuple(sorted(cpus)),
        gpus=tuple(sorted(gpus)),
    )


@cache
def load_quotas() -> QuotaTable:
    """The packaged quota configuration, read once."""
    text = resources.files("functions.planning").joinpath("data/quotas.json").read_text()
    try:
        return parse_quotas(json.loads(text))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"data/quotas.json is not valid JSON: {exc}") from exc
