"""The demo's dataset is as real data is: not linearly separable, and noisy, so its run's metrics say something."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from landfall.synthetic import DEMO_LABEL_NOISE, demo_csv_shards


def _table(shards: list[str]) -> tuple[np.ndarray, np.ndarray]:
    rows = [row for text in shards for row in list(csv.reader(io.StringIO(text)))[1:]]
    table = np.array(rows, dtype=float)
    return table[:, :-1], table[:, -1]


def test_the_demo_data_is_balanced_noisy_and_beyond_a_linear_model() -> None:
    x, y = _table(demo_csv_shards(shards=8, rows_per_shard=500))
    assert x.shape == (4000, 8) and set(np.unique(y)) == {0.0, 1.0}
    assert 0.35 < y.mean() < 0.65
    side = (x[:, 0] * x[:, 1] + np.sin(2 * x[:, 2]) + 0.5 * x[:, 3] - 0.25 * x[:, 4] ** 2 + 0.25 > 0).astype(float)
    assert abs((side != y).mean() - DEMO_LABEL_NOISE) < 0.02  # the flipped share, within sampling error
    design = np.hstack([x, np.ones((len(x), 1))])
    weights, *_ = np.linalg.lstsq(design, 2 * y - 1, rcond=None)
    linear = ((design @ weights > 0) == (y == 1)).mean()
    assert 0.55 < linear < 0.85  # a linear model learns something, and far from everything


def test_the_demo_data_is_reproducible_and_refuses_too_few_features() -> None:
    assert demo_csv_shards(seed=3) == demo_csv_shards(seed=3) != demo_csv_shards(seed=4)
    with pytest.raises(ValueError, match="at least 5 features"):
        demo_csv_shards(features=4)
