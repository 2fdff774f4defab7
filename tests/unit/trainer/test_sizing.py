"""How a tabular run adapts to the table's size (trainer/sizing.py): the held-out share, the
epochs a small table gets, the warning on a held-out set too small to trust, and early stopping."""

from __future__ import annotations

import pytest

from schemas.run_metrics import RUN_WARNING_CODES, run_warnings
from schemas.trainer_flags import HparamValues
from trainer.sizing import MAX_VAL_FRACTION, EarlyStopping, held_out_fraction, held_out_warnings, planned_steps


@pytest.mark.parametrize(
    ("rows", "val_fraction", "min_held_out", "expected"),
    [
        (150, 0.1, 30, 0.2),  # iris: 15 rows at 10 %, 30 at 20 %
        (112, 0.1, 30, 30 / 112),  # the iris split: 9 rows before
        (569, 0.1, 30, 0.1),  # breast cancer already holds out 57
        (1_000_000, 0.1, 30, 0.1),  # a large table keeps val_fraction
        (60, 0.1, 30, MAX_VAL_FRACTION),  # a tiny table: capped, the rest stays for training
        (150, 0.4, 30, 0.4),  # a larger share asked for is kept
        (150, 0.0, 30, 0.0),  # nothing held out on purpose
        (150, 0.1, 0, 0.1),  # the adaptation switched off
    ],
)
def test_held_out_share_grows_on_small_tables_only(
    rows: int, val_fraction: float, min_held_out: int, expected: float
) -> None:
    assert held_out_fraction(rows, val_fraction, min_held_out) == pytest.approx(expected)


def test_small_tables_get_epochs_until_min_steps_and_large_ones_keep_theirs() -> None:
    # iris under the default route: 120 training rows, batch 64 -> 1 step an epoch; 10 epochs were 10 steps
    assert planned_steps(lambda _e: 1, 10, 300) == [1] * 300
    assert sum(planned_steps(lambda _e: 7, 10, 300)) == 301  # whole epochs: 43 of 7 steps
    assert planned_steps(lambda _e: 500, 10, 300) == [500] * 10  # a large table: exactly --epochs
    assert planned_steps(lambda _e: 1, 10, 0) == [1] * 10  # min_steps=0: exactly --epochs
    # epochs may differ in steps (shards dealt to several processes); each added epoch asks for its own count
    assert planned_steps(lambda e: 2 + e % 2, 2, 12) == [2, 3, 2, 3, 2]
    assert planned_steps(lambda _e: 0, 3, 300) == [0, 0, 0]  # no full batch: left to the caller's DataError


def test_defaults_of_the_trainer_flags_adapt() -> None:
    flags = HparamValues()
    assert (flags.min_steps, flags.min_held_out, flags.early_stopping_patience) == (300, 30, 10)


def test_a_held_out_set_smaller_than_min_held_out_is_warned_about_and_the_warning_reads_back() -> None:
    (warning,) = held_out_warnings(9, 30, "tabular-classification")
    assert warning.code in RUN_WARNING_CODES
    assert "9 rows" in warning.message and "11.1 points" in warning.message and "min_held_out=30" in warning.message
    assert run_warnings({"warnings": [warning.to_dict()]}) == (warning,)
    (regression,) = held_out_warnings(20, 30, "tabular-regression")
    assert "R²" in regression.message
    assert held_out_warnings(30, 30, "tabular-classification") == []
    assert held_out_warnings(0, 30, "tabular-classification") == []  # nothing held out: nothing to distrust
    assert held_out_warnings(9, 0, "tabular-classification") == []  # the check switched off


def test_early_stopping_keeps_the_best_epoch_and_stops_after_patience_once_min_steps_are_done() -> None:
    early = EarlyStopping(patience=2, min_steps=10)
    losses = [1.0, 0.5, 0.6, 0.7, 0.4, 0.45, 0.5]
    best = [early.record(epoch, loss) for epoch, loss in enumerate(losses, start=1)]
    assert best == [True, True, False, False, True, False, False]
    assert (early.best_epoch, early.best_loss, early.stale) == (5, 0.4, 2)
    assert not early.should_stop(step=9)  # patience is spent, but min_steps are not done
    assert early.should_stop(step=10)
    assert not EarlyStopping(patience=0).should_stop(step=10**6)
