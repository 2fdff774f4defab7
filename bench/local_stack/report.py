"""Tables of latency percentiles: rich when it is installed, plain text otherwise."""

from __future__ import annotations

import os
from collections.abc import Sequence

from bench.local_stack.harness import percentile

QUANTILES = (50, 90, 99)


def summary(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """count, p50/p90/p99 and max in milliseconds of the known values."""
    known = [v * 1000 for v in values if v is not None]
    out: dict[str, float | int | None] = {"count": len(known)}
    for q in QUANTILES:
        out[f"p{q}_ms"] = round(percentile(known, q), 1) if known else None
    out["max_ms"] = round(max(known), 1) if known else None
    return out


def print_table(title: str, rows: dict[str, dict[str, float | int | None]]) -> None:
    columns = ["count", *(f"p{q}_ms" for q in QUANTILES), "max_ms"]
    cells = {name: [("-" if row[c] is None else f"{row[c]:g}") for c in columns] for name, row in rows.items()}
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(n) for n in rows)
        print(title)
        print(" " * width + "  " + "  ".join(f"{c:>9}" for c in columns))
        for name, values in cells.items():
            print(f"{name:<{width}}  " + "  ".join(f"{v:>9}" for v in values))
        return
    table = Table(title=title)
    table.add_column("from finalize / hop")
    for c in columns:
        table.add_column(c, justify="right")
    for name, values in cells.items():
        table.add_row(name, *values)
    Console().print(table)


def machine() -> dict[str, object]:
    """The machine the figures came from: CPUs and load average (other work on it shows here)."""
    one, five, fifteen = os.getloadavg()
    return {"nproc": os.cpu_count(), "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)]}
