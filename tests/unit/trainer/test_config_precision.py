"""Flag parsing and validation, and the precision each device gets."""

from __future__ import annotations

import pytest
import torch

from trainer.config import Hparams, parse_args
from trainer.errors import ConfigError
from trainer.precision import resolve_precision

BASE = [
    "--data-uri=gs://b/p/",
    "--task=causal-lm",
    "--model=gpt-tiny",
    "--epochs=2",
    "--batch-size=8",
    "--learning-rate=0.001",
    "--seed=3",
]


def test_the_dispatcher_command_line_parses() -> None:
    config = parse_args(
        [
            *BASE,
            "--strategy=fsdp",
            "--precision=bf16",
            "--label-column=y",
            "--checkpoint-every=50",
            "--max-steps=10",
            "--hparam",
            "warmup_steps=5",
            "--hparam",
            "val_fraction=0.2",
        ]
    )
    assert (config.strategy, config.precision, config.label_column) == ("fsdp", "bf16", "y")
    assert (config.checkpoint_every, config.max_steps) == (50, 10)
    assert config.hparams == Hparams(warmup_steps=5, val_fraction=0.2)
    assert parse_args([*BASE, "--hparam", "warmup_steps=5", "weight_decay=0.1"]).hparams.weight_decay == 0.1


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--hparam", "dropout=0.1"], "'dropout' is not a trainer flag"),
        (["--hparam", "warmup_steps=ten"], "expected an integer, got 'ten'"),
        (["--hparam", "weight_decay=nan"], "expected a finite number"),
        (["--hparam", "lr_schedule=linear"], "expected one of cosine, constant"),
        (["--hparam", "novalue"], "expected KEY=VALUE"),
        (["--hparam", "val_fraction=1.5"], "val_fraction=1.5"),
        (["--epochs=0"], "--epochs=0"),
        (["--learning-rate=-1"], "--learning-rate=-1"),
        (["--hparam", "data_format=csv"], "causal-lm reads text"),
    ],
)
def test_bad_values_are_rejected_with_the_reason(extra: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        parse_args([*BASE, *extra])


@pytest.mark.parametrize(
    ("requested", "cuda", "bf16", "expected"),
    [
        ("auto", False, False, ("fp32", None, False)),
        ("auto", True, True, ("bf16", torch.bfloat16, False)),
        ("auto", True, False, ("fp16", torch.float16, True)),  # T4 / V100: fp16 with loss scaling
        ("fp32", True, True, ("fp32", None, False)),
        ("bf16", False, False, ("bf16", torch.bfloat16, False)),
    ],
)
def test_precision_selection(requested: str, cuda: bool, bf16: bool, expected: tuple) -> None:
    p = resolve_precision(requested, cuda=cuda, bf16_supported=bf16)
    assert (p.name, p.autocast_dtype, p.loss_scaling) == expected
    assert p.device_type == ("cuda" if cuda else "cpu")


def test_impossible_precisions_say_what_to_use() -> None:
    with pytest.raises(ConfigError, match="no bf16"):
        resolve_precision("bf16", cuda=True, bf16_supported=False)
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        resolve_precision("fp16", cuda=False, bf16_supported=False)


def test_cpu_grad_scaler_is_a_pass_through() -> None:
    scaler = resolve_precision("auto", cuda=False, bf16_supported=False).grad_scaler()
    assert not scaler.is_enabled()
