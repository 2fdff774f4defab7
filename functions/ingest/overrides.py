"""landfall.json: per-dataset overrides of the route's training template, limited to what the route allows.

    {"hyperparameters": {"epochs": 10}, "constraints": {"budget_usd": 5}, "model": {"label_column": "y"}}

Every field the route does not allow is refused by name, with the reason (a mistyped one with the nearest settable
field), and so is a label that is Landfall's own (`landfall`, `landfall-*`); nothing is applied unless all are
allowed (a half-applied override would train something nobody asked for).
"""

from __future__ import annotations

import copy
from typing import Any

from deploy.routes import OVERRIDABLE_FIELDS, Route
from schemas import json_text
from schemas.fields import nearest
from schemas.request_labels import LABEL_PREFIX, LANDFALL_LABEL, is_landfalls

MAX_OVERRIDES_BYTES = 64 * 1024
_LEAF_MAPS = ("hyperparameters.extra", "labels", "trainer.env")
_SHOWN = 5
"""Refused fields named in one reason; the rest are counted."""


class OverrideError(ValueError):
    """landfall.json cannot be applied; the message names each refused field."""


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in _LEAF_MAPS:
            out += _leaves(value, f"{dotted}.")
        else:
            out.append((dotted, value))
    return out


def parse_overrides(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_OVERRIDES_BYTES:
        raise OverrideError(f"landfall.json is larger than {MAX_OVERRIDES_BYTES} bytes; it holds a few settings")
    try:
        raw = json_text.loads(data)
    except json_text.JsonTextError as exc:
        raise OverrideError(
            f'landfall.json is not JSON ({exc}); expected e.g. {{"hyperparameters": {{"epochs": 10}}}}'
        ) from exc
    if not isinstance(raw, dict):
        raise OverrideError('landfall.json must be a JSON object such as {"hyperparameters": {"epochs": 10}}')
    return raw


def apply_overrides(request: dict[str, Any], overrides: dict[str, Any], route: Route) -> dict[str, Any]:
    """request (the canonical TrainingRequest dict) with the overrides applied; OverrideError when any is refused."""
    refused, unknown = [], False
    leaves = _leaves(overrides)
    for dotted, value in leaves:
        shown = dotted if len(dotted) <= 80 else f"{dotted[:80]}..."  # a hostile key is cut, not echoed whole
        if dotted not in OVERRIDABLE_FIELDS:
            close = nearest(dotted, OVERRIDABLE_FIELDS)
            hint = f"; did you mean {close}?" if close else ""
            refused.append(f"{shown} (not a field a dataset can set{hint})")
            unknown = True
        elif not route.allows_override(dotted):
            allowed = ", ".join(route.overridable) or "none"
            refused.append(f"{dotted} (route {route.name!r} does not allow it; allowed: {allowed})")
        elif dotted == "labels" and isinstance(value, dict):
            refused += [
                f"labels.{key[:80]} (Landfall's own label: keys {LANDFALL_LABEL!r} and {LABEL_PREFIX}* are Landfall's "
                "to set; use another key)"
                for key in value
                if is_landfalls(key)
            ]
    if refused:
        more = f"; and {len(refused) - _SHOWN} more" if len(refused) > _SHOWN else ""
        settable = f" Settable fields: {', '.join(OVERRIDABLE_FIELDS)}." if unknown else ""
        raise OverrideError(
            "landfall.json sets fields it may not: "
            + "; ".join(refused[:_SHOWN])
            + more
            + "."
            + settable
            + " Remove them, or allow them in the route's `overridable` "
            "(deploy/routes.toml)"
        )
    merged = copy.deepcopy(request)
    for dotted, value in leaves:
        node = merged
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return merged
