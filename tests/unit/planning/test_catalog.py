"""The catalog data files and their one loader: shapes Vertex accepts, dated prices, clear errors on bad data."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from functions.planning.catalog import build_catalog, load_catalog
from functions.planning.errors import CatalogError
from functions.planning.quotas import load_quotas, parse_quotas


def raw(name: str) -> dict:
    # GPU kinds are shared with the trainer, measured points with the bench
    package = "schemas" if name in ("gpus.json", "throughput_points.json") else "functions.planning"
    data: dict = json.loads(resources.files(package).joinpath(f"data/{name}").read_text())
    return data


def build(**changes):
    names = ("gpus", "machines", "prices", "assumptions", "throughput_points")
    files = {name: raw(f"{name}.json") for name in names}
    for name, mutate in changes.items():
        files[name] = copy.deepcopy(files[name])
        mutate(files[name])
    return build_catalog(
        files["gpus"], files["machines"], files["prices"], files["assumptions"], points_raw=files["throughput_points"]
    )


FIXED = {  # vertex.md: accelerator count is fixed by the machine type
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-48": ("NVIDIA_L4", 4),
}
N1_LIMITS = {  # vertex.md: max vCPUs / GB RAM per GPU count
    "NVIDIA_TESLA_V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "NVIDIA_TESLA_T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "NVIDIA_TESLA_P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "NVIDIA_TESLA_P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}


def test_fixed_shapes_carry_their_vertex_counts():
    shapes = {
        s.machine_type: s for s in load_catalog().shapes if not s.machine_type.startswith(("n1", "e2", "n2", "c2"))
    }
    for machine, (kind, count) in FIXED.items():
        assert (shapes[machine].accelerator_type, shapes[machine].accelerator_count) == (kind, count)


def test_n1_gpu_shapes_respect_the_limits_per_gpu_count():
    n1 = [s for s in load_catalog().shapes if s.family == "n1" and s.accelerator_type]
    assert {s.accelerator_type for s in n1} == set(N1_LIMITS)
    for shape in n1:
        assert shape.accelerator_type is not None
        limits = N1_LIMITS[shape.accelerator_type]
        assert shape.accelerator_count in limits
        max_vcpus, max_memory = limits[shape.accelerator_count]
        assert shape.vcpus <= max_vcpus and shape.memory_gb <= max_memory
    counts = {(s.machine_type, s.accelerator_type, s.accelerator_count) for s in n1}
    assert ("n1-standard-16", "NVIDIA_TESLA_V100", 1) not in counts  # 16 vCPUs > 12 for one V100
    assert ("n1-standard-8", "NVIDIA_TESLA_V100", 1) in counts
    assert ("n1-highmem-96", "NVIDIA_TESLA_V100", 8) in counts


def test_every_shape_has_prices_in_every_region_it_is_offered():
    catalog = load_catalog()
    for shape in catalog.shapes:
        for region in shape.regions:
            for spot in (False, True):
                assert catalog.prices.quote(shape.machine_type, region, spot).usd_per_hour > 0
                if shape.accelerator_type:
                    assert catalog.prices.quote(shape.accelerator_type, region, spot).usd_per_hour > 0


def test_only_the_checked_figures_are_not_estimates():
    book = load_catalog().prices
    n1 = book.quote("n1-standard-4", "us-central1", False)
    h100 = book.quote("NVIDIA_H100_80GB", "us-central1", False)
    assert (n1.usd_per_hour, n1.estimate, n1.date) == (0.2185, False, "2026-09")
    assert (h100.usd_per_hour, h100.estimate, h100.date) == (9.797, False, "2026-10")
    assert book.quote("n1-standard-4", "us-central1", True).estimate  # spot derived from on demand
    assert book.quote("NVIDIA_H100_80GB", "europe-west4", False).estimate  # region multiplier
    others = [item for name, item in book.items.items() if name not in {"n1-standard-4", "NVIDIA_H100_80GB"}]
    assert others and all(item.estimate and "estimate" in item.source and item.date for item in others)


def test_cpu_only_machines_and_gpu_specs():
    catalog = load_catalog()
    cpu = [s for s in catalog.shapes if s.is_cpu_only]
    assert {"n1-standard-4", "e2-standard-4"} <= {s.machine_type for s in cpu}
    assert all(s.accelerator_count == 0 and "us-central1" in s.regions for s in cpu)
    assert not catalog.gpus["NVIDIA_TESLA_T4"].supports_bf16 and not catalog.gpus["NVIDIA_TESLA_V100"].supports_bf16
    assert catalog.gpus["NVIDIA_TESLA_T4"].mixed_precision() == "fp16"
    assert catalog.gpus["NVIDIA_H100_80GB"].peak_flops("bf16") == 989e12


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"machines": lambda m: m["fixed_shapes"][0].update(accelerator_type="NVIDIA_K80")},
            "fixed_shapes[0].accelerator_type: 'NVIDIA_K80' is not in gpus.json",
        ),
        ({"prices": lambda p: p["items"].pop("a3-highgpu-8g")}, "no price for a3-highgpu-8g"),
        ({"prices": lambda p: p["items"]["NVIDIA_L4"].pop("source")}, "items.NVIDIA_L4.source: expected a non-empty"),
        ({"gpus": lambda g: g["gpus"]["NVIDIA_L4"].update(assumed_mfu=1.5)}, "assumed_mfu: expected a fraction"),
        ({"machines": lambda m: m["fixed_shapes"].append(m["fixed_shapes"][0])}, "is listed twice"),
        ({"machines": lambda m: m["fixed_shapes"][0].update(regions="mars")}, "unknown region set 'mars'"),
        ({"assumptions": lambda a: a.pop("memory")}, "missing section 'memory'"),
        ({"prices": lambda p: p["region_multipliers"].pop("us-east4")}, "region_multipliers lacks us-east4"),
        (
            {"throughput_points": lambda t: t["points"][5].update(accelerator_type="NVIDIA_K80")},
            "throughput_points.json: points[5].accelerator_type: 'NVIDIA_K80' is not a GPU kind of gpus.json",
        ),
        (
            {"throughput_points": lambda t: t["points"][0].update(samples_per_second=1e6)},
            "throughput_points.json: gpt-124m x8 ddp on H100 80GB: a measured step of 8e-06 s is not above the "
            "planner's 0.004 s overhead",
        ),
    ],
)
def test_broken_data_fails_with_the_file_and_field(changes, message):
    with pytest.raises(CatalogError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build(**changes)


def test_quota_file_and_overrides():
    quotas = load_quotas()
    assert quotas.gpu_limit("us-central1", "NVIDIA_H100_80GB", False) == 128
    assert quotas.gpu_limit("europe-west4", "NVIDIA_L4", True) == 64
    changed = quotas.with_overrides({"europe-west4": {"cpus": 8, "gpus": {"NVIDIA_L4": {"preemptible": 2}}}})
    assert changed.gpu_limit("europe-west4", "NVIDIA_L4", True) == 2
    assert changed.gpu_limit("europe-west4", "NVIDIA_L4", False) == 64
    assert changed.cpu_limit("europe-west4") == 8 and changed.gpu_limit("us-central1", "NVIDIA_H100_80GB", False) == 128
    with pytest.raises(CatalogError, match=r"regions.x.gpus.NVIDIA_L4.on_demand: expected a whole number"):
        parse_quotas(
            {
                "default": {"cpus": 1, "gpus": {"on_demand": 1, "preemptible": 1}},
                "regions": {"x": {"gpus": {"NVIDIA_L4": {"on_demand": -1}}}},
            }
        )
