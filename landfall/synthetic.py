"""Small synthetic tabular datasets for the demo and tests, as CSV shards: well-separated classes for tests that check
the plumbing, and the demo's noisy, curved ones."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

DEMO_LABEL_NOISE = 0.08
"""The share of the demo's rows whose label is flipped: no model can be right on them."""


def _csv_shards(
    shards: int, rows_per_shard: int, features: int, row: Callable[[], tuple[list[float], int]]
) -> list[str]:
    """CSV texts with columns f0..f{n-1},label, each row from row(): (its features, its label)."""
    header = ",".join([*(f"f{i}" for i in range(features)), "label"])
    out = []
    for _ in range(shards):
        lines = [header]
        for _ in range(rows_per_shard):
            values, label = row()
            lines.append(",".join([*(f"{v:.5f}" for v in values), str(label)]))
        out.append("\n".join(lines) + "\n")
    return out


def separable_csv_shards(shards: int = 4, rows_per_shard: int = 250, features: int = 8, seed: int = 0) -> list[str]:
    """CSV texts with columns f0..f{n-1},label; class 1 is shifted by +1.5 on every feature (linearly separable
    with a wide margin, so a small MLP reaches accuracy >= 0.95)."""
    rng = random.Random(seed)

    def row() -> tuple[list[float], int]:
        label = rng.randint(0, 1)
        shift = 1.5 if label else -1.5
        return [rng.gauss(shift, 1.0) for _ in range(features)], label

    return _csv_shards(shards, rows_per_shard, features, row)


def demo_csv_shards(shards: int = 4, rows_per_shard: int = 250, features: int = 8, seed: int = 0) -> list[str]:
    """CSV texts with columns f0..f{n-1},label for `landfall demo`: the label is the side of a curved boundary
    (f0*f1 + sin(2*f2) + f3/2 - f4^2/4 + 1/4 > 0, the other features noise), then flipped on DEMO_LABEL_NOISE of the
    rows. Not linearly separable and noisy as real data is, so the metrics a run reports say something:
    mlp-small at the demo route's settings (10 epochs floored at 300 steps, batch 64, learning rate 0.01) ends near
    0.8 accuracy and a held-out loss near 0.4 on the default 4 x 250 rows, not 1 and 0."""
    if features < 5:
        raise ValueError(f"demo_csv_shards needs at least 5 features (the boundary uses f0..f4), got {features}")
    rng = random.Random(seed)

    def row() -> tuple[list[float], int]:
        x = [rng.gauss(0.0, 1.0) for _ in range(features)]
        side = x[0] * x[1] + math.sin(2 * x[2]) + 0.5 * x[3] - 0.25 * x[4] ** 2 + 0.25 > 0
        return x, int(side) ^ int(rng.random() < DEMO_LABEL_NOISE)

    return _csv_shards(shards, rows_per_shard, features, row)
