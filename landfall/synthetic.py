"""A small synthetic tabular dataset for the demo and tests: two well-separated classes, CSV shards."""

from __future__ import annotations

import random


def separable_csv_shards(shards: int = 4, rows_per_shard: int = 250, features: int = 8, seed: int = 0) -> list[str]:
    """CSV texts with columns f0..f{n-1},label; class 1 is shifted by +1.5 on every feature (linearly separable
    with a wide margin, so a small MLP reaches accuracy >= 0.95)."""
    rng = random.Random(seed)
    header = ",".join([*(f"f{i}" for i in range(features)), "label"])
    out = []
    for _ in range(shards):
        lines = [header]
        for _ in range(rows_per_shard):
            label = rng.randint(0, 1)
            shift = 1.5 if label else -1.5
            values = [f"{rng.gauss(shift, 1.0):.5f}" for _ in range(features)]
            lines.append(",".join([*values, str(label)]))
        out.append("\n".join(lines) + "\n")
    return out
