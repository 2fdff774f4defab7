"""Prices of machine types and accelerators per region, each with its date and source, in the price columns the
consumption modes name (vocabulary.PRICE_COLUMNS: on demand and Spot).

prices.json gives each item `{column}_usd_per_hour` for every column (null: on demand x `{column}_factor` for the
item's kind, an estimate); the on-demand column is required."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from functions.planning.errors import CatalogError
from schemas.vocabulary import ON_DEMAND, PRICE_COLUMNS, SPOT


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
    usd_per_hour: MappingProxyType[str, float | None]
    """Price column (vocabulary.PRICE_COLUMNS) -> the figure; None where the data leaves it to the column's factor."""
    date: str
    source: str
    estimate: bool

    @property
    def on_demand_usd_per_hour(self) -> float:
        return self.usd_per_hour[BASE_COLUMN] or 0.0


BASE_COLUMN = PRICE_COLUMNS[0]
"""The column every item must price (on demand); the others fall back to it x their factor."""


@dataclass(frozen=True)
class PriceBook:
    """Resolves the price of an item in a region; regional exact records win over base price x multiplier."""

    base_region: str
    items: MappingProxyType[str, PriceItem]
    """name -> PriceItem for the base region."""
    region_multipliers: MappingProxyType[str, float]
    multipliers_estimate: bool
    multipliers_source: str
    factors: MappingProxyType[str, MappingProxyType[str, float]]
    """Column other than on demand -> kind -> the fraction of the on-demand price charged when no figure is given
    (prices.json `{column}_factor`, e.g. spot_factor)."""
    factor_sources: MappingProxyType[str, str]
    regional: MappingProxyType[tuple[str, str], MappingProxyType[str, PriceQuote | None]]
    """(name, region) -> column -> PriceQuote (None where the record leaves it to the column's factor)."""

    def quote(self, name: str, region: str, spot: bool) -> PriceQuote:
        """The hourly price of `name` in `region`, on demand or on Spot; KeyError names what is missing."""
        return self.price(name, region, SPOT.price if spot else ON_DEMAND.price)

    def price(self, name: str, region: str, column: str) -> PriceQuote:
        """The hourly price of `name` in `region` in one price column (a ConsumptionMode's `price`); KeyError names
        what is missing."""
        exact = self.regional.get((name, region))
        if exact is not None:
            quote = exact[column]
            if quote is not None:
                return quote
            base = exact[BASE_COLUMN]
            assert base is not None  # parse_prices requires the base column
            factor = self.factors[column][self.items[name].kind]
            return PriceQuote(
                base.usd_per_hour * factor,
                True,
                base.date,
                f"{base.source}; {column} = on-demand x {factor} ({self.factor_sources[column]})",
            )
        item = self.items[name]
        if region not in self.region_multipliers:
            raise KeyError(f"no price multiplier for region {region!r}")
        multiplier = self.region_multipliers[region]
        regional = region != self.base_region
        figure = item.usd_per_hour[column]
        if figure is not None:
            usd, estimate, note = figure, item.estimate, ""
        else:
            factor = self.factors[column][item.kind]
            usd, estimate, note = item.on_demand_usd_per_hour * factor, True, f"; {column} = on-demand x {factor}"
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


def _columns(spec: dict[str, Any], where: str) -> MappingProxyType[str, float | None]:
    """Every price column's `{column}_usd_per_hour`: the on-demand one required, the others optional (null)."""
    return MappingProxyType(
        {
            column: _number(spec, f"{column}_usd_per_hour", where) or 0.0
            if column == BASE_COLUMN
            else _number(spec, f"{column}_usd_per_hour", where, optional=True)
            for column in PRICE_COLUMNS
        }
    )


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
            usd_per_hour=_columns(spec, where),
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
    factors: dict[str, MappingProxyType[str, float]] = {}
    factor_sources: dict[str, str] = {}
    for column in PRICE_COLUMNS[1:]:
        table = raw.get(f"{column}_factor") or {}
        for kind in ("machine", "accelerator"):
            factor = table.get(kind)
            if not isinstance(factor, int | float) or not 0 < factor <= 1:
                raise CatalogError(
                    f"prices.json: {column}_factor.{kind}: expected a fraction in (0, 1], got {factor!r}"
                )
        factors[column] = MappingProxyType({k: float(table[k]) for k in ("machine", "accelerator")})
        factor_sources[column] = str(table.get("source", ""))
    regional: dict[tuple[str, str], MappingProxyType[str, PriceQuote | None]] = {}
    for i, spec in enumerate(raw.get("regional") or []):
        where = f"prices.json: regional[{i}]"
        name, region = _text(spec, "item", where), _text(spec, "region", where)
        if name not in items:
            raise CatalogError(f"{where}.item: {name!r} has no base record under items")
        if region not in multipliers:
            raise CatalogError(f"{where}.region: unknown region {region!r}")
        date, source = _text(spec, "date", where), _text(spec, "source", where)
        estimate = _flag(spec, "estimate", where)
        regional[(name, region)] = MappingProxyType(
            {
                column: None if usd is None else PriceQuote(usd, estimate, date, source)
                for column, usd in _columns(spec, where).items()
            }
        )
    return PriceBook(
        base_region=base,
        items=MappingProxyType(items),
        region_multipliers=MappingProxyType({k: float(v) for k, v in multipliers.items()}),
        multipliers_estimate=bool(raw.get("region_multipliers_estimate", True)),
        multipliers_source=str(raw.get("region_multipliers_source", "")),
        factors=MappingProxyType(factors),
        factor_sources=MappingProxyType(factor_sources),
        regional=MappingProxyType(regional),
    )
