"""How a tabular run adapts to the table's size: the held-out share, the number of epochs, and early stopping.

A route's template (deploy/routes.toml) fixes epochs and the batch for every dataset it takes; on a table of 112
rows that was 10 optimizer steps and 9 held-out rows. Three knobs (schemas/trainer_flags.py) fix it:

- min_held_out: the held-out share grows from val_fraction (up to MAX_VAL_FRACTION) until it holds that many rows,
  and a run that still holds out fewer gets a warning on its record (schemas/run_metrics.py);
- min_steps: epochs are added until the run takes that many optimizer steps (the batch, which the planner sized,
  stays as planned);
- early_stopping_patience: the held-out loss is checked at each epoch's end; the run stops after that many epochs
  without a better one (once min_steps are done) and keeps the best epoch's weights.

Pure functions and one small record: trainer/run.py and trainer/loop.py apply them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from schemas.run_metrics import RunWarning

MAX_VAL_FRACTION = 0.3
"""The held-out share min_held_out may grow val_fraction to: beyond it the training rows shrink more than the
figures gain."""
MAX_EPOCHS = 10_000
"""Epochs min_steps may raise a run to (a table of one batch needs min_steps epochs)."""


def held_out_fraction(rows: int, val_fraction: float, min_held_out: int) -> float:
    """The share of rows to hold out: val_fraction, or more (up to MAX_VAL_FRACTION) so that about min_held_out
    rows are held out. val_fraction 0 (nothing held out) and min_held_out 0 are kept as given."""
    if val_fraction <= 0 or min_held_out <= 0 or rows <= 0:
        return val_fraction
    return max(val_fraction, min(MAX_VAL_FRACTION, min_held_out / rows))


def planned_steps(steps_in_epoch: Callable[[int], int], epochs: int, min_steps: int) -> list[int]:
    """Optimizer steps per epoch: the requested epochs, then more until they add up to min_steps (MAX_EPOCHS at
    most). steps_in_epoch(e) is epoch e's step count (it may differ between epochs when shards are dealt to
    several processes)."""
    steps = [steps_in_epoch(e) for e in range(epochs)]
    while sum(steps) < min_steps and len(steps) < MAX_EPOCHS and min(steps) > 0:
        steps.append(steps_in_epoch(len(steps)))
    return steps


def held_out_warnings(held_out: int, min_held_out: int, task: str) -> list[RunWarning]:
    """A warning when the figures are measured on fewer held-out rows than min_held_out (none when nothing is held
    out on purpose, or the check is off)."""
    if held_out <= 0 or min_held_out <= 0 or held_out >= min_held_out:
        return []
    figure = (
        f"one row moves accuracy by {100 / held_out:.1f} points"
        if task == "tabular-classification"
        else "R² and RMSE on so few rows vary widely from one split to the next"
    )
    return [
        RunWarning(
            code="small-held-out",
            message=(
                f"the held-out figures are measured on {held_out} rows, fewer than min_held_out={min_held_out}: "
                f"{figure}; do not trust them to compare models. Add rows to the dataset, or compare on a "
                "held-out table of your own."
            ),
        )
    ]


@dataclass
class EarlyStopping:
    """The best held-out loss so far and how many epochs have passed without beating it."""

    patience: int
    """Epochs without a better held-out loss before the run stops; 0 = never stop early."""
    min_steps: int = 0
    """Never stop before this many optimizer steps (the run's min_steps): on a table of one batch an epoch is one
    step, and ten noisy steps are no sign that training is done."""
    best_loss: float = float("inf")
    best_epoch: int = 0
    """1-based epoch of best_loss; 0 before the first evaluation."""
    stale: int = 0
    stopped_epoch: int = 0
    """1-based epoch after which the run stopped early; 0 = it did not."""

    def record(self, epoch: int, loss: float) -> bool:
        """Note epoch's held-out loss; True when it is the best so far (its weights are the ones to keep)."""
        if loss < self.best_loss:
            self.best_loss, self.best_epoch, self.stale = loss, epoch, 0
            return True
        self.stale += 1
        return False

    def should_stop(self, step: int) -> bool:
        """Whether the run stops after an epoch that ended at optimizer step `step`."""
        return self.patience > 0 and self.stale >= self.patience and step >= self.min_steps

    def to_dict(self) -> dict[str, float | int]:
        return {
            "min_steps": self.min_steps,
            "patience": self.patience,
            "best_loss": self.best_loss,
            "best_epoch": self.best_epoch,
            "stale": self.stale,
            "stopped_epoch": self.stopped_epoch,
        }
