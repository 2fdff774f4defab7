"""Synthetic training data for the trainer's tests: tables with a known rule, and byte-level text."""

from __future__ import annotations

import json
import random
from pathlib import Path


def separable_rows(n: int, seed: int) -> list[tuple[float, float, float, int]]:
    """Rows (a, b, c, label) with label = [a + 2b > 0.5]: linearly separable; c is noise on another scale."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, c = rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(50, 20)
        rows.append((a, b, c, int(a + 2 * b > 0.5)))
    return rows


def csv_text(rows: list[tuple[float, float, float, int]], label: str = "label") -> str:
    lines = [f"a,b,c,{label}"] + [f"{a:.5f},{b:.5f},{c:.3f},{y}" for a, b, c, y in rows]
    return "\n".join(lines) + "\n"


def write_csv_shards(root: Path, shards: int, rows_per_shard: int, seed: int = 0) -> Path:
    """shards CSV files plus a _SUCCESS marker and a .hidden file (neither is data)."""
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        (root / f"part-{s:03d}.csv").write_text(csv_text(separable_rows(rows_per_shard, seed * 1000 + s)))
    (root / "_SUCCESS").write_text("")
    (root / ".landfall.json").write_text(json.dumps({"not": "data"}))
    return root


def text_corpus(n_lines: int, seed: int) -> str:
    """Repetitive English-like lines a tiny model can learn quickly."""
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house"]
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + ".\n" for _ in range(n_lines))
