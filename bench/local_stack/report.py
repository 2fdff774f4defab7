"""Tables of latency percentiles: rich when it is installed, plain text otherwise."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from bench.local_stack.harness import percentile
from bench.local_stack.limits import MethodMinutes

QUANTILES = (50, 90, 99)


def summary(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """count, p50/p90/p99 and max in milliseconds of the known values."""
    known = [v * 1000 for v in values if v is not None]
    out: dict[str, float | int | None] = {"count": len(known)}
    for q in QUANTILES:
        out[f"p{q}_ms"] = round(percentile(known, q), 1) if known else None
    out["max_ms"] = round(max(known), 1) if known else None
    return out


def print_table(
    title: str, rows: dict[str, dict[str, float | int | None]], first_column: str = "from finalize / hop"
) -> None:
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
    table.add_column(first_column)
    for c in columns:
        table.add_column(c, justify="right")
    for name, values in cells.items():
        table.add_row(name, *values)
    Console().print(table)


def machine() -> dict[str, object]:
    """The machine the figures came from: CPUs and load average (other work on it shows here)."""
    one, five, fifteen = os.getloadavg()
    return {"nproc": os.cpu_count(), "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)]}


def print_calls_per_minute(rows: Sequence[MethodMinutes], limits: Mapping[str, int]) -> None:
    """The Vertex calls per minute by method (a row per minute of the test) under each method's limit ("-" where
    none is set), "+N" for the calls refused for it in that minute."""
    if not rows:
        print("Vertex calls per minute: none counted")
        return
    regions = sorted({r.region for r in rows})
    heads = [r.method if len(regions) == 1 else f"{r.method} {r.region}" for r in rows]
    widths = [max(len(h), 8) for h in heads]

    def line(first: str, cells: Sequence[str]) -> None:
        print(f"{first:>6}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))

    print(
        f"Vertex calls per minute by method ({', '.join(regions)}; minute 0: the drops began; +N: refused for a "
        "rate limit)"
    )
    line("minute", heads)
    line("limit", [str(limits.get(r.method, "-")) for r in rows])
    for i in range(len(rows[0].calls)):
        line(str(i), [f"{r.calls[i]}" + (f" +{r.refused[i]}" if r.refused[i] else "") for r in rows])
    line("peak", [f"{r.peak}" + (f" +{sum(r.refused)}" if sum(r.refused) else "") for r in rows])
