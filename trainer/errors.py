"""The trainer's error hierarchy: each message says what was expected, what arrived and what to do."""

from __future__ import annotations


class TrainerError(Exception):
    """Base of every error the trainer raises on purpose; the entry point logs it and exits non-zero."""

    exit_code = 1


class ConfigError(TrainerError, ValueError):
    """A flag, hyperparameter or environment variable is missing, malformed or contradicts another."""

    exit_code = 2


class DataError(TrainerError, ValueError):
    """The training data breaks its format; the message names the file and, where it helps, the line."""

    exit_code = 3

    def __init__(self, uri: str, message: str, *, line: int | None = None, unit: str = "line") -> None:
        self.uri = uri
        self.line = line
        where = f"{uri} {unit} {line}" if line is not None else uri
        super().__init__(f"{where}: {message}")


class OutOfMemory(TrainerError):
    """The accelerator or host ran out of memory; the message says what to reduce."""

    exit_code = 4


class Preempted(TrainerError):
    """SIGTERM arrived (Vertex sends it before a spot preemption); a checkpoint was written before exiting."""

    exit_code = 143


TRAINER_STATUSES = frozenset(cls.exit_code for cls in (ConfigError, DataError, OutOfMemory, Preempted))
"""Exit statuses that name a cause; any other non-zero status is a crash."""
