"""The trained model under AIP_MODEL_DIR, and the documented way to load it back.

AIP_MODEL_DIR/model.pt     the model's state_dict (fp32, CPU tensors; torch.save format)
AIP_MODEL_DIR/config.json  what is needed to rebuild it: task, preset shape, data spec, training config
AIP_MODEL_DIR/metrics.json the run's figures (trainer/metrics.py)

    from trainer.model_io import load_model
    loaded = load_model("gs://bucket/run/model/")          # or a local directory
    loaded.predict([[0.1, 2.0, 3.5]])                       # tabular: the data's class labels, or values
    loaded.generate("Once upon", max_new_bytes=40)          # causal-lm: byte-level continuation
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from schemas.model_presets import GptPreset, MlpPreset
from trainer import storage
from trainer.models.gpt import GPT, qkv_head_major
from trainer.models.mlp import TabularMLP

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
MODEL_CONFIG_VERSION = 2
"""2: a GPT's attention qkv rows are head-major (trainer/models/gpt.py). Version 1 files (query-key-value-major rows)
load through load_model, which reorders them."""


def model_config(
    task: str, preset: MlpPreset | GptPreset, data_spec: dict[str, Any], train_config: dict[str, Any], precision: str
) -> dict[str, Any]:
    """The config.json saved beside the weights."""
    return {
        "schema_version": MODEL_CONFIG_VERSION,
        "task": task,
        "preset": dataclasses.asdict(preset),
        "data": data_spec,
        "train_config": train_config,
        "precision": precision,
    }


def save_model(model_dir: str, state_dict: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
    """Write model.pt and config.json under model_dir (gs:// or local)."""
    with tempfile.TemporaryDirectory(prefix="landfall-model-") as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        torch.save({k: v.detach().to("cpu") for k, v in state_dict.items()}, path)
        storage.upload_file(path, storage.join(model_dir, MODEL_FILE))
    storage.write_bytes(storage.join(model_dir, CONFIG_FILE), json.dumps(config, indent=2).encode(), "application/json")


def build_from_config(config: dict[str, Any]) -> nn.Module:
    """An untrained module of the saved shape (no access to the presets file, which may have moved on)."""
    preset = dict(config["preset"])
    if preset.pop("family") == "gpt":
        return GPT(GptPreset(**preset))
    data = config["data"]
    return TabularMLP(len(data["feature_names"]), tuple(preset["hidden_sizes"]), data["n_outputs"])


@dataclass
class LoadedModel:
    """A trained model in eval mode with its config."""

    module: nn.Module
    config: dict[str, Any]

    @property
    def task(self) -> str:
        return str(self.config["task"])

    @property
    def classes(self) -> list[int | str]:
        """Classification: the label values in class-id order, as the training data wrote them."""
        return list(self.config["data"].get("classes") or [])

    @torch.no_grad()
    def predict(self, features: torch.Tensor | list[list[float]]) -> torch.Tensor | list[str]:
        """Tabular: raw feature rows (columns in config['data']['feature_names'] order) -> the predicted labels.

        Classification: the data's own labels - a list of str when they are text ("benign"), an int64 tensor when
        they are integers. Regression: a float tensor in the label's units. Features are standardised inside the
        model with the training split's statistics.
        """
        if self.task == "tabular-classification":
            ids, classes = self.predict_ids(features), self.classes
            if not classes:  # a model saved before labels were mapped: ids are the labels
                return ids
            if all(isinstance(c, int) for c in classes):
                return torch.tensor(classes, dtype=torch.int64)[ids]
            return [str(classes[i]) for i in ids.tolist()]
        out = self._forward(features)
        data = self.config["data"]
        return out.squeeze(-1) * float(data["label_std"]) + float(data["label_mean"])

    @torch.no_grad()
    def predict_ids(self, features: torch.Tensor | list[list[float]]) -> torch.Tensor:
        """Classification: class ids (indices into `classes`) for raw feature rows."""
        if self.task != "tabular-classification":
            raise TypeError(f"a {self.task} model has no classes: call predict(rows)")
        return self._forward(features).argmax(-1)

    def _forward(self, features: torch.Tensor | list[list[float]]) -> torch.Tensor:
        if self.task == "causal-lm":
            raise TypeError("a causal-lm model generates text: call generate(prompt)")
        out: torch.Tensor = self.module(torch.as_tensor(features, dtype=torch.float32))  # Module.__call__ is untyped
        return out

    @torch.no_grad()
    def generate(self, prompt: str, max_new_bytes: int = 64, temperature: float = 0.0, seed: int = 0) -> str:
        """Continue prompt byte by byte (greedy when temperature is 0); invalid UTF-8 is replaced on decoding."""
        if self.task != "causal-lm":
            raise TypeError(f"a {self.task} model predicts from features: call predict(rows)")
        seq_len = int(self.config["preset"]["seq_len"])
        tokens = list(prompt.encode("utf-8")) or [10]
        generator = torch.Generator().manual_seed(seed)
        for _ in range(max_new_bytes):
            logits = self.module(torch.tensor([tokens[-seq_len:]]))[0, -1]
            if temperature <= 0:
                tokens.append(int(logits.argmax()))
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                tokens.append(int(torch.multinomial(probs, 1, generator=generator)))
        return bytes(tokens).decode("utf-8", errors="replace")


def load_model(model_dir: str, map_location: str = "cpu") -> LoadedModel:
    """Load what the trainer wrote under model_dir (a gs:// URI, a /gcs/ path or a local directory)."""
    with tempfile.TemporaryDirectory(prefix="landfall-model-") as tmp:
        config_path, weights_path = os.path.join(tmp, CONFIG_FILE), os.path.join(tmp, MODEL_FILE)
        storage.download_file(storage.join(model_dir, CONFIG_FILE), config_path)
        storage.download_file(storage.join(model_dir, MODEL_FILE), weights_path)
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
        state = torch.load(weights_path, map_location=map_location, weights_only=True)
    module = build_from_config(config)
    if isinstance(module, GPT) and int(config.get("schema_version", 1)) < 2:
        state = qkv_head_major(state, module.preset.n_head)
    module.load_state_dict(state)
    module.eval()
    return LoadedModel(module, config)
