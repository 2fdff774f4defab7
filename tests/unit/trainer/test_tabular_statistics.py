"""Standardisation statistics: fitted on the training split only, exact for large offsets, and merged across
ranks so that every rank holds the same bits."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from trainer.datasets.shards import is_validation
from trainer.datasets.tabular import Moments, TabularCorpus


def _corpus(folder: Path, text: str, task: str = "tabular-classification") -> TabularCorpus:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.csv").write_text(text)
    return TabularCorpus([str(folder / "part-0.csv")], task, "label", "auto", 1, 0.1)


def test_standardisation_uses_the_training_split_only(tmp_path: Path) -> None:
    text = "x,label\n" + "".join(f"{i * i},{'ab'[i % 2]}\n" for i in range(200))
    corpus = _corpus(tmp_path, text)
    counts = corpus.scan(rank=0, device="cpu")
    train = torch.tensor([float(i * i) for i in range(200) if not is_validation(0, i, 0.1)], dtype=torch.float64)
    assert corpus.spec is not None and sum(counts.train) == len(train) and sum(counts.val) == 200 - len(train)
    assert corpus.spec.feature_mean[0] == pytest.approx(float(train.mean()), rel=1e-9)
    assert corpus.spec.feature_std[0] == pytest.approx(float(train.std(unbiased=False)), rel=1e-9)


def test_large_offsets_keep_their_spread(tmp_path: Path) -> None:
    # Unix timestamps a few seconds apart: sums of squares (x ~ 1.7e9, x^2 ~ 3e18) lose the spread entirely.
    rng = random.Random(0)
    stamps = [1_700_000_000 + rng.uniform(0, 10) for _ in range(3000)]
    text = "t,label\n" + "".join(f"{t:.6f},{'ab'[i % 2]}\n" for i, t in enumerate(stamps))
    corpus = _corpus(tmp_path, text)
    corpus.scan(rank=0, device="cpu")
    train = torch.tensor([t for i, t in enumerate(stamps) if not is_validation(0, i, 0.1)], dtype=torch.float64)
    assert corpus.spec is not None
    assert corpus.spec.feature_std[0] == pytest.approx(float(train.std(unbiased=False)), rel=1e-6)


def test_regression_target_is_standardised_with_the_training_split(tmp_path: Path) -> None:
    text = "x,label\n" + "".join(f"{i},{3 * i + 1000}\n" for i in range(500))
    corpus = _corpus(tmp_path, text, task="tabular-regression")
    corpus.scan(rank=0, device="cpu")
    y = torch.tensor([3.0 * i + 1000 for i in range(500) if not is_validation(0, i, 0.1)], dtype=torch.float64)
    assert corpus.spec is not None
    assert corpus.spec.label_mean == pytest.approx(float(y.mean()), rel=1e-12)
    assert corpus.spec.label_std == pytest.approx(float(y.std(unbiased=False)), rel=1e-9)


def test_parts_merged_in_rank_order_match_one_pass() -> None:
    rng = random.Random(1)
    rows = [[rng.gauss(5, 2), rng.gauss(-1e6, 3)] for _ in range(1000)]
    whole = Moments.of(rows)
    parts = [Moments.of(rows[:10]), Moments.empty(2), Moments.of(rows[10:700]), Moments.of(rows[700:])]
    merged = Moments.combine(parts)
    assert merged.count == 1000
    assert torch.allclose(merged.mean, whole.mean, rtol=1e-12)
    assert torch.allclose(merged.variance(), whole.variance(), rtol=1e-9)
    assert torch.equal(Moments.combine(parts).m2, merged.m2)  # deterministic: the same inputs, the same bits
