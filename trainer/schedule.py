"""Learning-rate schedule: linear warm-up, then cosine decay to a floor (or constant)."""

from __future__ import annotations

import math
from collections.abc import Callable

from trainer.config import Hparams


def lr_multiplier(total_steps: int, hp: Hparams) -> Callable[[int], float]:
    """step -> factor applied to the peak learning rate (for torch.optim.lr_scheduler.LambdaLR)."""

    def factor(step: int) -> float:
        if hp.warmup_steps and step < hp.warmup_steps:
            return (step + 1) / hp.warmup_steps
        if hp.lr_schedule == "constant":
            return 1.0
        span = max(1, total_steps - hp.warmup_steps)
        progress = min(1.0, (step - hp.warmup_steps) / span)
        return hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
