"""scripts/refresh_prices.py on a fake SKU list (pure logic: SKU matching, machine = cores + RAM, records that the
catalog loader accepts and the planner then quotes as checked, non-estimate prices)."""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest

from functions.planning.prices import parse_prices

SCRIPT = Path(__file__).parents[3] / "scripts/refresh_prices.py"


@pytest.fixture(scope="module")
def refresh():
    spec = importlib.util.spec_from_file_location("refresh_prices", SCRIPT)
    assert spec is not None and spec.loader is not None, f"cannot load {SCRIPT} as a module"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sku(sku_id, description, price, regions=("us-central1",), usage="OnDemand"):
    units, nanos = int(price), round((price - int(price)) * 1e9)
    return {
        "skuId": sku_id,
        "description": description,
        "category": {"usageType": usage},
        "serviceRegions": list(regions),
        "pricingInfo": [
            {
                "pricingExpression": {
                    "usageUnit": "h",
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                }
            }
        ],
    }


SKUS = [
    sku("A-1", "Custom Training: N1 Predefined Instance Core running in Americas", 0.0365),
    sku("A-2", "Custom Training: N1 Predefined Instance Ram running in Americas", 0.0049),
    sku("A-3", "Spot Custom Training: N1 Predefined Instance Core running in Americas", 0.011, usage="Preemptible"),
    sku("A-4", "Spot Custom Training: N1 Predefined Instance Ram running in Americas", 0.0015, usage="Preemptible"),
    sku("G-1", "Custom Training: Nvidia Tesla T4 GPU running in Americas", 0.4025, regions=("us-central1", "us-east1")),
    sku("G-2", "Custom Training: Nvidia H100 80GB GPU running in Americas", 9.797),
    sku("G-3", "Custom Training: Nvidia H100 80GB Mega GPU running in Americas", 11.5),
    sku("X-1", "Online prediction: N1 Predefined Instance Core", 9.0),  # not training: ignored
]


def test_skus_become_exact_regional_records(refresh):
    machines = json.loads((SCRIPT.parents[1] / "functions/planning/data/machines.json").read_text())
    found = refresh.collect(SKUS)
    assert found[("n1", "core", False, "us-central1")] == (0.0365, "A-1")
    assert found[("NVIDIA_H100_MEGA_80GB", "gpu", False, "us-central1")][0] == 11.5
    assert ("NVIDIA_H100_80GB", "gpu", False, "us-central1") in found and ("n1", "core", False, "x") not in found
    records, missing = refresh.records(found, machines, ["us-central1", "us-east1"], "2026-11-22")
    by_key = {(r["item"], r["region"]): r for r in records}
    n1 = by_key[("n1-standard-4", "us-central1")]
    assert n1["on_demand_usd_per_hour"] == pytest.approx(4 * 0.0365 + 15 * 0.0049)
    assert n1["spot_usd_per_hour"] == pytest.approx(4 * 0.011 + 15 * 0.0015)
    assert n1["estimate"] is False and "A-1" in n1["source"] and n1["date"] == "2026-11-22"
    t4_east = by_key[("NVIDIA_TESLA_T4", "us-east1")]
    assert t4_east["on_demand_usd_per_hour"] == 0.4025 and t4_east["spot_usd_per_hour"] is None
    assert "n1-standard-4 us-east1" in missing and "a3-highgpu-8g us-central1" in missing  # no A3 core/RAM SKUs

    prices = json.loads(resources.files("functions.planning").joinpath("data/prices.json").read_text())
    prices["regional"] = records
    book = parse_prices(prices, tuple(machines["region_sets"]["all"]))
    quote = book.quote("n1-standard-4", "us-central1", False)
    assert quote.usd_per_hour == pytest.approx(4 * 0.0365 + 15 * 0.0049) and not quote.estimate
    spot_t4 = book.quote("NVIDIA_TESLA_T4", "us-east1", True)
    assert spot_t4.estimate and spot_t4.usd_per_hour == pytest.approx(0.4025 * 0.35)
    assert book.quote("NVIDIA_L4", "us-central1", False).estimate  # untouched items stay estimates
    assert json.loads(refresh.dump_prices(prices)) == prices
