"""trainer/speed.py: which optimizer implementation and compile setting a device gets, the fallback to eager when
compiling fails, and reading batches ahead without changing them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from trainer.errors import ConfigError
from trainer.speed import CompileState, compile_units, first_step, read_ahead, resolve_speed


@pytest.mark.parametrize(
    ("environ", "device", "compiled", "adamw", "prefetch"),
    [
        ({}, "cpu", False, "foreach", 0),
        ({}, "cuda:0", True, "fused", 2),
        ({"LANDFALL_COMPILE": "on"}, "cpu", True, "foreach", 0),
        ({"LANDFALL_COMPILE": "OFF"}, "cuda:1", False, "fused", 2),
        ({"LANDFALL_COMPILE": "auto"}, "cpu", False, "foreach", 0),
    ],
)
def test_the_device_and_the_setting_decide(
    environ: dict[str, str], device: str, compiled: bool, adamw: str, prefetch: int
) -> None:
    speed = resolve_speed(environ, device)
    assert (speed.compile, speed.adamw, speed.prefetch_batches) == (compiled, adamw, prefetch)
    assert speed.adamw_options() == {adamw: True}
    assert speed.pin_memory == device.startswith("cuda")


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"LANDFALL_COMPILE": "yes"}, "LANDFALL_COMPILE"),
        ({"LANDFALL_COMPILE_BACKEND": "tvm"}, "LANDFALL_COMPILE_BACKEND"),
    ],
)
def test_an_unknown_setting_is_refused_by_name(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        resolve_speed(environ, "cpu")


def test_a_compile_failure_falls_back_to_eager_and_says_why() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    units = compile_units(model, list(model), "eager")
    assert all("forward" in vars(u) for u in units)
    state = CompileState(resolve_speed({"LANDFALL_COMPILE": "on"}, "cpu"), units)
    calls: list[str] = []

    def step() -> torch.Tensor:
        calls.append("step")
        if len(calls) == 1:
            raise RuntimeError("inductor: no C++ compiler")
        return torch.ones(3)

    result = first_step(state, step, lambda: None, lambda: calls.append("reset"))
    assert calls == ["step", "reset", "step"] and torch.equal(result, torch.ones(3))
    assert state.seconds is None and not state.pending
    assert (
        state.fallback is not None and "no C++ compiler" in state.fallback and "LANDFALL_COMPILE=off" in state.fallback
    )
    assert not any("forward" in vars(u) for u in units), "the blocks run eagerly again"


def test_a_compiled_first_step_is_timed() -> None:
    model = nn.Linear(2, 2)
    state = CompileState(resolve_speed({"LANDFALL_COMPILE": "on"}, "cpu"), compile_units(model, [], "eager"))
    assert state.pending and state.units == [model]
    first_step(state, lambda: model(torch.ones(1, 2)), lambda: None, lambda: None)
    assert state.seconds is not None and state.seconds >= 0 and not state.pending


def _batches(n: int, fail_at: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(n):
        if i == fail_at:
            raise OSError("shard gone")
        yield torch.full((2,), i), torch.full((2,), -i)


def test_reading_ahead_keeps_the_batches_and_their_order() -> None:
    got = [(int(x[0]), int(y[0])) for x, y in read_ahead(_batches(7), 2, pin=False)]
    assert got == [(i, -i) for i in range(7)]


def test_a_read_error_reaches_the_training_thread() -> None:
    seen = []
    with pytest.raises(OSError, match="shard gone"):
        for x, _ in read_ahead(_batches(5, fail_at=3), 2, pin=False):
            seen.append(int(x[0]))
    assert seen == [0, 1, 2]


def test_stopping_early_ends_the_reader() -> None:
    reader = read_ahead(_batches(100), 2, pin=False)
    assert int(next(reader)[0][0]) == 0
    reader.close()  # the loop stopped (preemption, --max-steps): the thread must not stay blocked on a full queue
    assert not [t for t in threading.enumerate() if t.name == "landfall-read-ahead"]
