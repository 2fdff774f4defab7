"""Test hook, off unless LANDFALL_TRAINER_TEST_OOM is set: simulate the accelerator running out of memory.

End-to-end tests need a job that fails the way a real out-of-memory does, and a CPU replica never runs out of GPU
memory. When LANDFALL_TRAINER_TEST_OOM holds a text that the run's --data-uri contains, the first training step
raises torch.cuda.OutOfMemoryError, which the trainer handles exactly as a real one (trainer/run.py: an
OutOfMemory failure record, exit status 4). Nothing sets the variable outside tests (tests/e2e/conftest.py).
"""

from __future__ import annotations

from collections.abc import Mapping

OOM_VARIABLE = "LANDFALL_TRAINER_TEST_OOM"


def simulated_oom(data_uri: str, environ: Mapping[str, str]) -> str | None:
    """The simulated error's text when the hook is on for this dataset, else None."""
    marker = environ.get(OOM_VARIABLE, "")
    if not marker or marker not in data_uri:
        return None
    return (
        f"CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test hook {OOM_VARIABLE}={marker!r} "
        "for this dataset)"
    )


def raise_if_simulated_oom(data_uri: str, environ: Mapping[str, str]) -> None:
    message = simulated_oom(data_uri, environ)
    if message is not None:
        import torch

        raise torch.cuda.OutOfMemoryError(message)


__all__ = ["OOM_VARIABLE", "raise_if_simulated_oom", "simulated_oom"]
