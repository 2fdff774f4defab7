"""SIGTERM (Vertex's notice before a spot preemption or a cancel) and SIGINT become a flag the loop polls.

The loop checks the flag after every step; with several processes the ranks agree (a max all-reduce) so all of
them stop after the same step, write one checkpoint together and exit.
"""

from __future__ import annotations

import signal
from types import FrameType

import torch

from trainer import collectives
from trainer.logs import log


class PreemptionWatch:
    """Installs the handlers on creation; restore() puts the previous ones back."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.requested:
            log("stop requested: will checkpoint after the current step", severity="WARNING",
                signal=signal.Signals(signum).name)
        self.requested = True

    def agreed(self, device: str) -> bool:
        """True on every rank once any rank was signalled (a collective when distributed)."""
        if not collectives.active():
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0])
        return bool(collectives.all_reduce(flag, device, op="max").item() > 0)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
