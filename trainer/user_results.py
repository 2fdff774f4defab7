"""What a team's own code leaves for the run when it fails: the classified failure record
(schemas/trainer_failure.py). Its metrics lines become metrics.json through schemas/user_metrics.py.

Classification, first match (vocabulary.TRAINER_FAILURE_KIND_TERMS gives each kind its reason):
- a process killed by SIGKILL (the kernel's OOM killer), or "out of memory" / MemoryError in its last stderr lines
  (CUDA's "CUDA out of memory", torch.OutOfMemoryError) -> OutOfMemory (out-of-memory);
- ModuleNotFoundError / ImportError in them -> ConfigError (bad-config: a requirement the request did not list);
- any other non-zero exit -> the exception named on the last line (or UserCodeExit): user-code, with the last
  stderr lines as the message. A SIGTERM the launcher received (Vertex's preemption notice) is not a failure of the
  code: like the built-in trainer, the replica exits 143 and leaves no record.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from schemas.trainer_failure import MESSAGE_LIMIT, TrainerFailure

ERROR_LINES = 12
"""Last stderr lines put on run.error."""

_OOM = re.compile(r"out of memory|OutOfMemoryError|\bMemoryError\b", re.I)
_MISSING_MODULE = re.compile(r"\b(ModuleNotFoundError|ImportError)\b")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))\b")


def classify_exit(codes: Sequence[int], stderr_tail: Sequence[str], *, rank: int | None) -> TrainerFailure:
    """The failure record of a node whose processes ended with these exit codes (negative: killed by that signal)."""
    failed = [code for code in codes if code != 0] or [1]
    exit_code = next((c for c in failed if c > 0), 128 - failed[0])
    lines = [line.rstrip() for line in stderr_tail if line.strip()]
    tail = "\n".join(lines[-ERROR_LINES:])
    if -signal.SIGKILL in failed:
        kind = "OutOfMemory"
        message = "a training process was killed by SIGKILL: most often the kernel's OOM killer (host out of memory)"
        message += f"; its last lines:\n{tail}" if tail else ""
    elif any(_OOM.search(line) for line in lines[-ERROR_LINES * 4 :]):
        kind, message = "OutOfMemory", _around(lines, _OOM)
    elif any(_MISSING_MODULE.search(line) for line in lines):
        kind = "ConfigError"
        message = _around(lines, _MISSING_MODULE) + "\nlist the package in trainer.requirements"
    else:
        found = _EXCEPTION.match(lines[-1]) if lines else None
        kind = found.group(1).rsplit(".", 1)[-1] if found else "UserCodeExit"
        message = tail or f"the training code exited with status {exit_code} and wrote nothing to stderr"
    if len(message) > MESSAGE_LIMIT:
        message = "..." + message[-(MESSAGE_LIMIT - 3) :]
    return TrainerFailure(kind=kind, message=message, exit_code=exit_code, rank=rank)


def _around(lines: list[str], pattern: re.Pattern[str]) -> str:
    """The last line matching pattern, with the lines before it that give it context."""
    last = max(i for i, line in enumerate(lines) if pattern.search(line))
    return "\n".join(lines[max(0, last - 3) : last + 1])
