"""The trainer's `--hparam KEY=VALUE` flags, as data: the one table the trainer builds its Hparams record and parser
from (trainer/config.py), and that the dispatcher's request rules and `landfall plan` check a request against.

A request's `hyperparameters.extra` reaches the trainer as one `--hparam KEY=VALUE` per entry
(functions/dispatch/job_spec.py). `extra_problems` answers, before any machine starts, exactly what the trainer's
parser would: the key must be a flag below and the value must parse as its type (and be one of its choices).
Ranges (e.g. val_fraction < 1) stay the trainer's own checks, with the reason, in Hparams.validate.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

Value = int | float | str

DATA_FORMATS = ("auto", "csv", "parquet", "jsonl", "text")
"""What data_format accepts: auto picks by file extension; the others force one reader."""
LR_SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class HparamFlag:
    """One key of `--hparam KEY=VALUE`."""

    name: str
    kind: type[int] | type[float] | type[str]
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


_KIND_NAMES = {int: "an integer", float: "a number", str: "text"}

HPARAM_FLAGS: tuple[HparamFlag, ...] = (
    HparamFlag("weight_decay", float, 0.0, "AdamW weight decay."),
    HparamFlag("warmup_steps", int, 0, "Linear learning-rate warm-up from 0 over this many optimizer steps."),
    HparamFlag(
        "lr_schedule",
        str,
        "cosine",
        "'cosine' (decay to min_lr_ratio x learning rate at the last step) or 'constant'.",
        choices=LR_SCHEDULES,
    ),
    HparamFlag("min_lr_ratio", float, 0.1, "Floor of the cosine schedule as a fraction of the learning rate."),
    HparamFlag("grad_clip", float, 1.0, "Clip the global gradient norm to this value; 0 disables clipping."),
    HparamFlag(
        "val_fraction",
        float,
        0.1,
        "Share of rows (tabular) or lines (text) held out for evaluation, chosen by a hash of their position.",
    ),
    HparamFlag(
        "shuffle_window",
        int,
        4096,
        "Samples permuted together; the order is a function of the seed and the epoch only.",
    ),
    HparamFlag(
        "keep_checkpoints",
        int,
        3,
        "How many complete checkpoints to keep in AIP_CHECKPOINT_DIR; older ones are deleted.",
    ),
    HparamFlag("log_every", int, 50, "Log a progress record every this many steps (rank 0)."),
    HparamFlag(
        "data_format",
        str,
        "auto",
        "'auto' picks by file extension (.csv, .parquet, .jsonl/.json, "
        ".txt/.text); or force one of csv, parquet, jsonl, text.",
        choices=DATA_FORMATS,
    ),
)

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
