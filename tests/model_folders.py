"""Small built-in trainer model folders (model.pt + config.json through trainer.model_io), written without a training
run: a TabularMLP or a GPT with seeded random weights, for tests of what loads and serves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from schemas.model_presets import GptPreset, MlpPreset
from trainer.model_io import LoadedModel, build_from_config, model_config, save_model

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
CLASSES = ["setosa", "versicolor", "virginica"]


def tabular_config(task: str = "tabular-classification") -> dict[str, Any]:
    """config.json of a 4-feature MLP: three text classes, or a regression label in units around 10."""
    data: dict[str, Any] = {"feature_names": FEATURES}
    if task == "tabular-classification":
        data |= {"n_outputs": len(CLASSES), "classes": CLASSES}
    else:
        data |= {"n_outputs": 1, "label_mean": 10.0, "label_std": 2.0}
    return model_config(task, MlpPreset(name="tiny", hidden_sizes=(8,)), data, {}, "fp32")


def gpt_config() -> dict[str, Any]:
    preset = GptPreset(name="tiny", n_layer=1, d_model=16, n_head=2, seq_len=16, vocab_size=256)
    return model_config("causal-lm", preset, {}, {}, "fp32")


def loaded(config: dict[str, Any], seed: int = 0) -> LoadedModel:
    """The model of config with seeded random weights, in eval mode, as load_model would give it."""
    torch.manual_seed(seed)
    module = build_from_config(config)
    module.eval()
    return LoadedModel(module, config)


def write_model_dir(path: Path, config: dict[str, Any], seed: int = 0) -> Path:
    """A model folder the trainer could have written (save_model), for load_model and trainer.serve."""
    save_model(str(path), loaded(config, seed).module.state_dict(), config)
    return path
