"""Build the model a preset names, for the data the trainer found."""

from __future__ import annotations

from typing import Any

from torch import nn

from schemas.errors import SchemaError
from schemas.model_presets import GptPreset, MlpPreset, get_preset
from trainer.errors import ConfigError
from trainer.models.gpt import GPT
from trainer.models.mlp import TabularMLP


def build_model(
    preset_name: str, task: str, data_spec: dict[str, Any], activation_checkpointing: bool = False
) -> nn.Module:
    """An MLP for tabular tasks (widths from data_spec) or a GPT for causal-lm (its blocks checkpointed when asked);
    rejects a preset of the wrong family."""
    try:
        preset = get_preset(preset_name)
    except SchemaError as exc:
        raise ConfigError(f"--model: {exc}") from exc
    if task == "causal-lm":
        if not isinstance(preset, GptPreset):
            raise ConfigError(f"--model={preset_name} is an {preset.family} preset; --task=causal-lm needs a gpt-* one")
        return GPT(preset, activation_checkpointing)
    if not isinstance(preset, MlpPreset):
        raise ConfigError(f"--model={preset_name} is a {preset.family} preset; --task={task} needs an mlp-* one")
    return TabularMLP(
        len(data_spec["feature_names"]),
        preset.hidden_sizes,
        data_spec["n_outputs"],
        data_spec["feature_mean"],
        data_spec["feature_std"],
    )
