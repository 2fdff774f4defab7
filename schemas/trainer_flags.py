"""The trainer's `--hparam KEY=VALUE` flags, written once: HparamValues, the typed record the trainer's Hparams
extends (trainer/config.py), and HPARAM_FLAGS, the same fields as a table that the trainer builds its parser from and
that the dispatcher's request rules and `landfall plan` check a request against.

A request's `hyperparameters.extra` reaches the trainer as one `--hparam KEY=VALUE` per entry
(functions/dispatch/job_spec.py). `extra_problems` answers, before any machine starts, exactly what the trainer's
parser would: the key must be a flag below and the value must parse as its type (and be one of its choices).
Ranges (e.g. val_fraction < 1) stay the trainer's own checks, with the reason, in Hparams.validate.
"""

# No `from __future__ import annotations`: HPARAM_FLAGS reads HparamValues's field types at runtime (int, float, str).

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

Value = int | float | str
_V = TypeVar("_V", int, float, str)

DATA_FORMATS = ("auto", "csv", "parquet", "jsonl", "text")
"""What data_format accepts: auto picks by file extension; the others force one reader."""
LR_SCHEDULES = ("cosine", "constant")


def _flag(default: _V, help: str, choices: tuple[str, ...] = ()) -> _V:
    """One field of HparamValues: its default, the help `--hparam` shows and (str flags) the values allowed."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class HparamValues:
    """The values of `--hparam KEY=VALUE`: one field per flag, with its type, default and help (the one place they
    are written). The trainer's Hparams (trainer/config.py) adds the range checks; HPARAM_FLAGS is this as a table."""

    weight_decay: float = _flag(0.0, "AdamW weight decay.")
    warmup_steps: int = _flag(0, "Linear learning-rate warm-up from 0 over this many optimizer steps.")
    lr_schedule: str = _flag(
        "cosine", "'cosine' (decay to min_lr_ratio x learning rate at the last step) or 'constant'.", LR_SCHEDULES
    )
    min_lr_ratio: float = _flag(0.1, "Floor of the cosine schedule as a fraction of the learning rate.")
    grad_clip: float = _flag(1.0, "Clip the global gradient norm to this value; 0 disables clipping.")
    val_fraction: float = _flag(
        0.1, "Share of rows (tabular) or lines (text) held out for evaluation, chosen by a hash of their position."
    )
    min_held_out: int = _flag(
        30,
        "Tabular: hold out at least this many rows; on a small table the held-out share grows from val_fraction up "
        "to 0.3 to reach it (0 keeps val_fraction as given). Fewer held-out rows than this puts a warning on the run.",
    )
    min_steps: int = _flag(
        300,
        "Tabular: train at least this many optimizer steps; on a small table the epochs are raised until the run "
        "has them (0 trains exactly --epochs). --max-steps still caps the run.",
    )
    early_stopping_patience: int = _flag(
        10,
        "Tabular, with rows held out: stop once the held-out loss has not improved for this many epochs, and keep "
        "the weights of the best epoch (0 trains every epoch and keeps the last weights).",
    )
    shuffle_window: int = _flag(
        4096, "Samples permuted together; the order is a function of the seed and the epoch only."
    )
    keep_checkpoints: int = _flag(
        3, "How many complete checkpoints to keep in AIP_CHECKPOINT_DIR; older ones are deleted."
    )
    log_every: int = _flag(50, "Log a progress record every this many steps (rank 0).")
    data_format: str = _flag(
        "auto",
        "'auto' picks by file extension (.csv, .parquet, .jsonl/.json, .txt/.text); or force one of csv, parquet, "
        "jsonl, text.",
        DATA_FORMATS,
    )


Kind = type[int] | type[float] | type[str]
_KIND_NAMES: dict[Kind, str] = {int: "an integer", float: "a number", str: "text"}


@dataclass(frozen=True)
class HparamFlag:
    """One key of `--hparam KEY=VALUE`."""

    name: str
    kind: Kind
    """The Python type the value is read as: int, float or str."""
    default: Value
    help: str
    choices: tuple[str, ...] = ()
    """For str flags: the values allowed; empty = any."""

    def parse(self, raw: str) -> Value:
        """raw (the text after KEY=) as the trainer reads it; ValueError saying what was expected."""
        try:
            value = self.kind(raw)
        except ValueError:
            raise ValueError(f"expected {_KIND_NAMES[self.kind]}, got {raw!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {raw!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {raw!r}")
        return value


def _as_flag(spec: dataclasses.Field[Any]) -> HparamFlag:
    """One HparamValues field as its table row; a TypeError when the field is not one `--hparam` can carry."""
    kind = next((k for k in _KIND_NAMES if k is spec.type), None)
    if kind is None or not isinstance(spec.default, kind):
        raise TypeError(
            f"HparamValues.{spec.name}: type {spec.type!r} with default {spec.default!r}; expected int, float or str "
            "with a default of that type"
        )
    return HparamFlag(spec.name, kind, spec.default, spec.metadata["help"], spec.metadata["choices"])


HPARAM_FLAGS: tuple[HparamFlag, ...] = tuple(_as_flag(spec) for spec in dataclasses.fields(HparamValues))

HPARAMS: Mapping[str, HparamFlag] = MappingProxyType({flag.name: flag for flag in HPARAM_FLAGS})


def unknown_key_message(key: str) -> str:
    """Why key is not a trainer flag, with the nearest known key when there is one and every known key."""
    near = difflib.get_close_matches(key, HPARAMS, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"{key!r} is not a trainer flag{hint}; known keys: {', '.join(HPARAMS)}"


def extra_problems(extra: Mapping[str, str], field: str = "hyperparameters.extra") -> list[str]:
    """Every reason the trainer would refuse these `--hparam` entries, each naming its key (empty: it takes them)."""
    problems = []
    for key, raw in sorted(extra.items()):
        flag = HPARAMS.get(key)
        if flag is None:
            problems.append(f"{field}: {unknown_key_message(key)}")
            continue
        try:
            flag.parse(raw)
        except ValueError as exc:
            problems.append(f"{field}.{key}: {exc}")
    return problems
