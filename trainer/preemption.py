"""SIGTERM (Vertex's notice before a spot preemption or a cancel) and SIGINT become a flag the loop polls.

The loop checks the flag after every step; with several processes the ranks agree (a max all-reduce) so all of
them stop after the same step, write one checkpoint together and exit. The all-reduce is asynchronous and its
answer is read one step later, so polling never stalls a GPU pipeline waiting for the host.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import torch

from trainer import collectives
from trainer.logs import log


class PreemptionWatch:
    """Installs the handlers on creation; restore() puts the previous ones back."""

    def __init__(self) -> None:
        self.requested = False
        self._pending: tuple[Any, torch.Tensor] | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.requested:
            log(
                "stop requested: will checkpoint after the current step",
                severity="WARNING",
                signal=signal.Signals(signum).name,
            )
        self.requested = True

    def agreed(self, device: str, due: bool = False) -> tuple[bool, bool]:
        """(stop, due), the same on every rank at the same call: stop once any rank was signalled, due once any rank
        found a clock checkpoint due (a collective when distributed).

        Each call starts a max all-reduce of this rank's two flags and answers with the previous call's result (the
        one the all-reduce it waits for carried), so a step's collective overlaps the next step's work.
        """
        if not collectives.active():
            return self.requested, due
        import torch.distributed as dist

        flags = torch.tensor([1.0 if self.requested else 0.0, 1.0 if due else 0.0], device=device)
        work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True)
        previous, self._pending = self._pending, (work, flags)
        if previous is None:
            return False, False
        previous[0].wait()
        stop, clock = previous[1].tolist()
        return stop > 0, clock > 0

    def drain(self) -> None:
        """Wait for the last outstanding all-reduce (call before leaving the process group)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
