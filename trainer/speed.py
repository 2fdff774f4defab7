"""How the trainer runs at the speed of its device: the optimizer's implementation, torch.compile per block, and
data loading off the critical path. One frozen record, resolved once per process from the device and the
environment, and logged.

LANDFALL_COMPILE: auto (default: on for CUDA, off on CPU, where compiling costs more than it saves on small models),
on or off. On, each transformer block (the unit FSDP shards: trainer/parallel.py shard_units) is compiled on its own
with torch.compile, so that compile time grows with one block, not with the depth; a model without blocks (the
tabular MLP) is compiled whole. LANDFALL_COMPILE_BACKEND picks torch.compile's backend (default inductor; aot_eager
traces without generating code, for machines without a C++ compiler).

AdamW: fused (one kernel for every parameter) on CUDA; foreach (a few batched kernels) on CPU, where there is no
fused kernel faster than it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainer.datasets.stream import Batch
from trainer.errors import ConfigError

COMPILE_ENV = "LANDFALL_COMPILE"
COMPILE_MODES = ("auto", "on", "off")
COMPILE_BACKEND_ENV = "LANDFALL_COMPILE_BACKEND"
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
PREFETCH_BATCHES = 2
"""Batches read ahead by a background thread when the device is a GPU."""


@dataclass(frozen=True)
class SpeedSettings:
    """How this process trains fast; logged at the start of training."""

    compile: bool
    """torch.compile each block (resolved from LANDFALL_COMPILE and the device)."""
    compile_requested: str
    """LANDFALL_COMPILE as given: auto, on or off."""
    compile_backend: str
    """torch.compile's backend."""
    adamw: str
    """AdamW's implementation: fused or foreach."""
    pin_memory: bool
    """Batches are copied into pinned host memory so the copy to the GPU overlaps compute."""
    prefetch_batches: int
    """Batches read ahead in a background thread (0: read on the training thread)."""

    def adamw_options(self) -> dict[str, Any]:
        """The keyword that selects AdamW's implementation."""
        return {self.adamw: True}

    def to_dict(self) -> dict[str, Any]:
        return {
            "compile": self.compile,
            "compile_requested": self.compile_requested,
            "compile_backend": self.compile_backend,
            "adamw": self.adamw,
            "pin_memory": self.pin_memory,
            "prefetch_batches": self.prefetch_batches,
        }


def resolve_speed(environ: Mapping[str, str], device: str) -> SpeedSettings:
    """The settings for `device` ('cpu' or 'cuda:N'); a ConfigError naming the variable when a value is unknown."""
    requested = environ.get(COMPILE_ENV, "auto").strip().lower() or "auto"
    if requested not in COMPILE_MODES:
        raise ConfigError(f"{COMPILE_ENV}={requested!r}: expected one of {', '.join(COMPILE_MODES)}")
    backend = environ.get(COMPILE_BACKEND_ENV, "inductor").strip() or "inductor"
    if backend not in COMPILE_BACKENDS:
        raise ConfigError(f"{COMPILE_BACKEND_ENV}={backend!r}: expected one of {', '.join(COMPILE_BACKENDS)}")
    cuda = device.startswith("cuda")
    return SpeedSettings(
        compile=requested == "on" or (requested == "auto" and cuda),
        compile_requested=requested,
        compile_backend=backend,
        adamw="fused" if cuda else "foreach",
        pin_memory=cuda,
        prefetch_batches=PREFETCH_BATCHES if cuda else 0,
    )


def compile_units(model: nn.Module, units: list[nn.Module], backend: str) -> list[nn.Module]:
    """Compile each unit's forward in place; the whole model's when it has no units. Only forward is compiled: the
    module's hooks (FSDP's gathers and frees, registered around each block) stay outside the compiled code, and the
    parameter names, so the checkpoints, do not change. Compilation itself happens on each unit's first call.
    Returns what was compiled, for uncompile()."""
    compiled = units or [model]
    for unit in compiled:
        unit.forward = torch.compile(unit.forward, backend=backend)
    return compiled


def uncompile(compiled: list[nn.Module]) -> None:
    """Back to eager: each module's own forward again (the compiled one was an attribute of the instance)."""
    for unit in compiled:
        if "forward" in vars(unit):
            del unit.forward


@dataclass
class CompileState:
    """The compiled modules of a run, until its first step has run (which is when compilation happens)."""

    settings: SpeedSettings
    units: list[nn.Module]
    seconds: float | None = None
    """Wall seconds of the first optimizer step, compilation included (None: not compiled, or fell back)."""
    fallback: str | None = None
    """Why the run went back to eager, when it did."""

    @property
    def pending(self) -> bool:
        return bool(self.units) and self.seconds is None and self.fallback is None


def first_step(
    state: CompileState, step: Callable[[], torch.Tensor], sync: Callable[[], None], reset: Callable[[], None]
) -> torch.Tensor:
    """Run the first optimizer step with the compiled blocks, timing it (compilation happens inside); if compiling
    fails, say why, go back to eager and run the step again. A failure can only come from the forward or the
    backward pass, before the optimizer has stepped, so the retried step is the same step."""
    started = time.perf_counter()
    try:
        result = step()
        sync()
    except Exception as exc:  # any compiler failure: the run goes on eagerly, and says so
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            raise
        uncompile(state.units)
        reset()
        state.fallback = (
            f"torch.compile ({state.settings.compile_backend}) failed on the first step, so the run trains eagerly "
            f"(slower on a GPU, the same results): {type(exc).__name__}: {str(exc)[:400]}. Set {COMPILE_ENV}=off to "
            f"skip compiling, or {COMPILE_BACKEND_ENV}=aot_eager where no C++ compiler is installed"
        )
        return step()
    state.seconds = time.perf_counter() - started
    return result


_END = object()


def read_ahead(batches: Iterator[Batch], count: int, pin: bool) -> Generator[Batch, None, None]:
    """The batches, read `count` ahead by a background thread (and pinned when `pin`), so reading and packing the
    next batches overlaps the step on the GPU; the batches themselves and their order are unchanged. count 0: the
    iterator as it is."""
    if count < 1:
        yield from batches
        return
    ready: queue.Queue[Any] = queue.Queue(maxsize=count)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for x, y in batches:
                if not put((x.pin_memory(), y.pin_memory()) if pin else (x, y)):
                    return
        except BaseException as exc:  # handed to the training thread, which raises it
            put(exc)
            return
        put(_END)

    worker = threading.Thread(target=produce, name="landfall-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)
