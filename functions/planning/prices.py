"""Prices of machine types and accelerators per region, on demand and spot, each with its date and source."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from functions.planning.errors import CatalogError


@dataclass(frozen=True)
class PriceQuote:
    """One hourly price with where it came from."""

    usd_per_hour: float
    estimate: bool
    date: str
    source: str


@dataclass(frozen=True)
class PriceItem:
    """The base-region record of one machine type or accelerator."""

    name: str
    kind: str
    """"machine" or "accelerator" (per GPU)."""
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    date: str
    source: str
    estimate: bool


@dataclass(frozen=True)
class PriceBook:
    """Resolves the price of an item in a region; regional exact records win over base price x multiplier."""

    base_region: str
    items: MappingProxyType[str, PriceItem]
    """name -> PriceItem for the base region."""
    region_multipliers: MappingProxyType[str, float]
    multipliers_estimate: bool
    multipliers_source: str
    spot_factor: MappingProxyType[str, float]
    """kind -> fraction of the on-demand price charged on Spot when no spot figure is given."""
    spot_factor_source: str
    regional: MappingProxyType[tuple[str, str], tuple[PriceQuote, PriceQuote | None]]
    """(name, region) -> (on_demand PriceQuote, spot PriceQuote | None)."""

    def quote(self, name: str, region: str, spot: bool) -> PriceQuote:
        """The hourly price of `name` in `region`; KeyError names what is missing."""
        exact = self.regional.get((name, region))
        if exact is not None:
            on_demand, spot_quote = exact
            if not spot:
                return on_demand
            if spot_quote is not None:
                return spot_quote
            base = on_demand
            factor = self.spot_factor[self.items[name].kind]
            return PriceQuote(
                base.usd_per_hour * factor,
                True,
                base.date,
                f"{base.source}; spot = on-demand x {factor} ({self.spot_factor_source})",
            )
        item = self.items[name]
        if region not in self.region_multipliers:
            raise KeyError(f"no price multiplier for region {region!r}")
        multiplier = self.region_multipliers[region]
        regional = region != self.base_region
        if spot and item.spot_usd_per_hour is not None:
            usd, estimate, note = item.spot_usd_per_hour, item.estimate, ""
        elif spot:
            factor = self.spot_factor[item.kind]
            usd, estimate, note = item.on_demand_usd_per_hour * factor, True, f"; spot = on-demand x {factor}"
        else:
            usd, estimate, note = item.on_demand_usd_per_hour, item.estimate, ""
        if regional:
            note += f"; {region} = {self.base_region} x {multiplier} ({self.multipliers_source})"
            estimate = estimate or self.multipliers_estimate
        return PriceQuote(usd * multiplier, estimate, item.date, item.source + note)


def _number(raw: dict[str, Any], key: str, where: str, optional: bool = False) -> float | None:
    value = raw.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CatalogError(f"{where}.{key}: expected a non-negative number, got {value!r}")
    return float(value)


def _text(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{where}.{key}: expected a non-empty string (every price needs its {key}), got {value!r}")
    return value


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise CatalogError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def parse_prices(raw: dict[str, Any], regions: tuple[str, ...]) -> PriceBook:
    """Validate prices.json: every figure has a date and a source and says whether it is an estimate."""
    items: dict[str, PriceItem] = {}
    for name, spec in (raw.get("items") or {}).items():
        where = f"prices.json: items.{name}"
        kind = spec.get("kind")
        if kind not in ("machine", "accelerator"):
            raise CatalogError(f"{where}.kind: expected 'machine' or 'accelerator', got {kind!r}")
        items[name] = PriceItem(
            name=name,
            kind=kind,
            on_demand_usd_per_hour=_number(spec, "on_demand_usd_per_hour", where) or 0.0,
            spot_usd_per_hour=_number(spec, "spot_usd_per_hour", where, optional=True),
            date=_text(spec, "date", where),
            source=_text(spec, "source", where),
            estimate=_flag(spec, "estimate", where),
        )
    multipliers = raw.get("region_multipliers") or {}
    missing = [r for r in regions if r not in multipliers]
    if missing:
        raise CatalogError(f"prices.json: region_multipliers lacks {', '.join(missing)}")
    base = raw.get("base_region")
    if not isinstance(base, str) or multipliers.get(base) != 1.0:
        raise CatalogError(f"prices.json: base_region {base!r} must have region multiplier 1.0")
    spot_factor = raw.get("spot_factor") or {}
    for kind in ("machine", "accelerator"):
        factor = spot_factor.get(kind)
        if not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise CatalogError(f"prices.json: spot_factor.{kind}: expected a fraction in (0, 1], got {factor!r}")
    regional: dict[tuple[str, str], tuple[PriceQuote, PriceQuote | None]] = {}
    for i, spec in enumerate(raw.get("regional") or []):
        where = f"prices.json: regional[{i}]"
        name, region = _text(spec, "item", where), _text(spec, "region", where)
        if name not in items:
            raise CatalogError(f"{where}.item: {name!r} has no base record under items")
        if region not in multipliers:
            raise CatalogError(f"{where}.region: unknown region {region!r}")
        date, source = _text(spec, "date", where), _text(spec, "source", where)
        estimate = _flag(spec, "estimate", where)
        on_demand = PriceQuote(_number(spec, "on_demand_usd_per_hour", where) or 0.0, estimate, date, source)
        spot_usd = _number(spec, "spot_usd_per_hour", where, optional=True)
        spot_quote = None if spot_usd is None else PriceQuote(spot_usd, estimate, date, source)
        regional[(name, region)] = (on_demand, spot_quote)
    return PriceBook(
        base_region=base,
        items=MappingProxyType(items),
        region_multipliers=MappingProxyType({k: float(v) for k, v in multipliers.items()}),
        multipliers_estimate=bool(raw.get("region_multipliers_estimate", True)),
        multipliers_source=str(raw.get("region_multipliers_source", "")),
        spot_factor=MappingProxyType({k: float(spot_factor[k]) for k in ("machine", "accelerator")}),
        spot_factor_source=str(spot_factor.get("source", "")),
        regional=MappingProxyType(regional),
    )
