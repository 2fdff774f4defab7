"""Refresh functions/planning/data/prices.json from the Cloud Billing Catalog API.

    .venv/bin/python scripts/refresh_prices.py --api-key KEY [--write]          # public catalog, API key
    .venv/bin/python scripts/refresh_prices.py --access-token "$(gcloud auth print-access-token)" [--write]
    .venv/bin/python scripts/refresh_prices.py --skus saved_skus.json [--write]   # a saved SKU list, offline

Procedure: list the Vertex AI service's SKUs (GET https://cloudbilling.googleapis.com/v1/services/{id}/skus,
currencyCode=USD, every page), keep the custom-training ones, and turn them into exact per-region records under
`regional` in prices.json (estimate: false, dated today, source naming the SKU ids):
- a machine type = vCPUs x the family's per-core SKU + memory (GiB) x the family's per-GiB RAM SKU;
- an accelerator = its per-GPU SKU;
- Spot prices come from SKUs whose usageType is Preemptible (or whose description says Spot).
Machine types or GPUs whose SKUs are not found keep their old figures (and stay estimates); the script lists them.
Without --write it prints what would change. Review the diff, run the planner tests (prices change plans and the
golden examples: `python -m tests.unit.planning.golden`), then commit.

The description patterns below are Landfall's reading of the SKU names ("... Training ... N1 Predefined Instance
Core running in ...", "... Nvidia Tesla T4 GPU ..."); SKU names are not a contract, so check the unmatched list
after every run and extend the patterns when Google renames SKUs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRICES = ROOT / "functions/planning/data/prices.json"
MACHINES = ROOT / "functions/planning/data/machines.json"
API = "https://cloudbilling.googleapis.com/v1"
SERVICE_NAME = "Vertex AI"
FAMILIES = ("n1", "n2", "e2", "c2", "a2", "a3", "a4", "g2")
GPU_PATTERNS = {
    "NVIDIA_TESLA_T4": r"\bt4\b",
    "NVIDIA_TESLA_P4": r"\bp4\b",
    "NVIDIA_TESLA_P100": r"\bp100\b",
    "NVIDIA_TESLA_V100": r"\bv100\b",
    "NVIDIA_L4": r"\bl4\b",
    "NVIDIA_TESLA_A100": r"\ba100\b(?!.*80)",
    "NVIDIA_A100_80GB": r"\ba100\b.*80",
    "NVIDIA_H100_80GB": r"\bh100\b(?!.*mega)",
    "NVIDIA_H100_MEGA_80GB": r"\bh100\b.*mega",
    "NVIDIA_H200_141GB": r"\bh200\b",
    "NVIDIA_B200": r"\bb200\b",
}


def unit_price(sku: dict[str, Any]) -> float | None:
    """USD per usage unit of the SKU's last (highest) tier; None when it has no usable price."""
    try:
        rates = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        price = rates[-1]["unitPrice"]
    except (KeyError, IndexError):
        return None
    return int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9


def classify(sku: dict[str, Any]) -> tuple[str, str, bool] | None:
    """(item, part, spot): item is a machine family ("n1") or an accelerator type; part is core, ram or gpu."""
    text = sku.get("description", "").lower()
    if "training" not in text:
        return None
    spot = sku.get("category", {}).get("usageType") == "Preemptible" or "spot" in text or "preemptible" in text
    if "gpu" in text or "nvidia" in text:
        for kind, pattern in GPU_PATTERNS.items():
            if re.search(pattern, text):
                return kind, "gpu", spot
        return None
    for family in FAMILIES:
        if re.search(rf"\b{family}\b", text):
            if re.search(r"\b(core|cpu|vcpu)\b", text):
                return family, "core", spot
            if re.search(r"\b(ram|memory)\b", text):
                return family, "ram", spot
    return None


def collect(skus: list[dict[str, Any]]) -> dict[tuple[str, str, bool, str], tuple[float, str]]:
    """(item, part, spot, region) -> (USD per unit, SKU id)."""
    found: dict[tuple[str, str, bool, str], tuple[float, str]] = {}
    for sku in skus:
        kind = classify(sku)
        price = unit_price(sku)
        if kind is None or price is None:
            continue
        for region in sku.get("serviceRegions", []):
            found.setdefault((*kind, region), (price, sku.get("skuId", "?")))
    return found


def machine_shapes(machines: dict[str, Any]) -> dict[str, tuple[str, int, float]]:
    """machine_type -> (family, vCPUs, memory GiB) for every machine type in machines.json."""
    shapes = {}
    for group in ("fixed_shapes", "n1_hosts", "cpu_shapes"):
        for spec in machines[group]:
            shapes[spec["machine_type"]] = (spec["machine_type"].split("-")[0], spec["vcpus"], spec["memory_gb"])
    return shapes


def records(found: dict, machines: dict[str, Any], regions: list[str], today: str) -> tuple[list[dict], list[str]]:
    """Exact regional price records, and the (item, region) pairs no SKU covered."""
    out, missing = [], []
    shapes = machine_shapes(machines)
    items: list[tuple[str, str]] = [(m, "machine") for m in shapes] + [(g, "gpu") for g in GPU_PATTERNS]
    for name, kind in items:
        for region in regions:
            prices: dict[bool, tuple[float, list[str]]] = {}
            for spot in (False, True):
                if kind == "gpu":
                    hit = found.get((name, "gpu", spot, region))
                    if hit:
                        prices[spot] = (hit[0], [hit[1]])
                else:
                    family, vcpus, memory = shapes[name]
                    core, ram = found.get((family, "core", spot, region)), found.get((family, "ram", spot, region))
                    if core and ram:
                        prices[spot] = (vcpus * core[0] + memory * ram[0], [core[1], ram[1]])
            if False not in prices:
                missing.append(f"{name} {region}")
                continue
            skus = prices[False][1] + (prices[True][1] if True in prices else [])
            out.append(
                {
                    "item": name,
                    "region": region,
                    "on_demand_usd_per_hour": round(prices[False][0], 6),
                    "spot_usd_per_hour": round(prices[True][0], 6) if True in prices else None,
                    "date": today,
                    "source": f"Cloud Billing Catalog API, {SERVICE_NAME} SKUs {', '.join(skus)}",
                    "estimate": False,
                }
            )
    return out, missing


def _get(url: str, api_key: str | None, token: str | None) -> dict[str, Any]:
    if api_key:
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"key": api_key})
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.load(response)
    if not isinstance(data, dict):
        raise SystemExit(f"the Cloud Billing API answered with JSON {type(data).__name__}, expected an object")
    return data


def fetch_skus(api_key: str | None, token: str | None) -> list[dict[str, Any]]:
    services, page = [], ""
    while True:
        data = _get(f"{API}/services?pageSize=5000&pageToken={page}", api_key, token)
        services += data.get("services", [])
        page = data.get("nextPageToken", "")
        if not page:
            break
    service = next((s for s in services if s.get("displayName") == SERVICE_NAME), None)
    if service is None:
        raise SystemExit(f"no billing service named {SERVICE_NAME!r}; the catalog lists {len(services)} services")
    skus, page = [], ""
    while True:
        data = _get(f"{API}/{service['name']}/skus?currencyCode=USD&pageSize=5000&pageToken={page}", api_key, token)
        skus += data.get("skus", [])
        page = data.get("nextPageToken", "")
        if not page:
            return skus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--api-key", help="Google API key allowed to call the Cloud Billing API")
    source.add_argument("--access-token", help="OAuth access token (gcloud auth print-access-token)")
    source.add_argument("--skus", type=Path, help="a saved JSON list of SKUs (or a {skus: [...]} response)")
    parser.add_argument("--write", action="store_true", help="rewrite prices.json (default: only report)")
    args = parser.parse_args()
    if args.skus:
        loaded = json.loads(args.skus.read_text())
        skus = loaded["skus"] if isinstance(loaded, dict) else loaded
    else:
        skus = fetch_skus(args.api_key, args.access_token)
    prices = json.loads(PRICES.read_text())
    machines = json.loads(MACHINES.read_text())
    new, missing = records(
        collect(skus), machines, machines["region_sets"]["all"], datetime.now(UTC).strftime("%Y-%m-%d")
    )
    print(f"{len(skus)} SKUs read; {len(new)} exact (item, region) prices; {len(missing)} not covered")
    for line in missing[:50]:
        print(f"  not covered: {line}")
    if not args.write:
        print("dry run: pass --write to update prices.json")
        return 0
    prices["regional"] = new
    PRICES.write_text(dump_prices(prices))
    print(f"wrote {PRICES}")
    return 0


def dump_prices(doc: dict[str, Any]) -> str:
    """prices.json's layout: top-level keys one per line, one line per item and per regional record."""
    lines = ["{"]
    keys = list(doc)
    for i, key in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        value = doc[key]
        if key == "items":
            entries = [f"    {json.dumps(name)}: {json.dumps(item)}" for name, item in value.items()]
            lines += ['  "items": {', ",\n".join(entries), "  }" + comma]
        elif key == "regional" and value:
            lines += ['  "regional": [', ",\n".join(f"    {json.dumps(r)}" for r in value), "  ]" + comma]
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join([*lines, "}"]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
