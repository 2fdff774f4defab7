"""Model presets: the shapes the planner and the trainer both know, loaded from data/model_presets.json."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from schemas.errors import SchemaError
from schemas.fields import Reader


@dataclass(frozen=True)
class MlpPreset:
    """A tabular multi-layer perceptron; input and output widths come from the data."""

    name: str
    hidden_sizes: tuple[int, ...]
    description: str = ""
    family: str = "mlp"

    def parameter_count(self, n_features: int, n_outputs: int) -> int:
        """Weights and biases of the linear layers for a table of n_features columns."""
        widths = [n_features, *self.hidden_sizes, n_outputs]
        return sum(a * b + b for a, b in itertools.pairwise(widths))


@dataclass(frozen=True)
class GptPreset:
    """A GPT-style decoder: pre-norm blocks, 4x MLP, learned positions, tied input/output embedding."""

    name: str
    n_layer: int
    d_model: int
    n_head: int
    seq_len: int
    vocab_size: int
    description: str = ""
    family: str = "gpt"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def parameter_count(self) -> int:
        """All parameters: per block 12*d^2 + 13*d (attention, MLP, two LayerNorms), embeddings, final LayerNorm."""
        d = self.d_model
        per_block = 12 * d * d + 13 * d
        embeddings = self.vocab_size * d + self.seq_len * d
        return self.n_layer * per_block + embeddings + 2 * d

    def non_embedding_parameter_count(self) -> int:
        """N in Kaplan et al.'s 6*N FLOPs per token."""
        return self.n_layer * (12 * self.d_model * self.d_model + 13 * self.d_model)


Preset = MlpPreset | GptPreset


@cache
def load_presets() -> dict[str, Preset]:
    """Read and validate every preset; a malformed file fails with the preset and field named."""
    raw = json.loads(resources.files("schemas").joinpath("data/model_presets.json").read_text())
    presets: dict[str, Preset] = {}
    specs = Reader(raw, "model_presets.json").obj("presets")
    for name in specs.data:
        try:
            presets[name] = _preset(name, specs.obj(name))
        except SchemaError as exc:
            raise SchemaError(f"model_presets.json: preset {name!r} is malformed: {exc}") from exc
    return presets


_KEYS = {
    "mlp": {"family", "hidden_sizes", "description"},
    "gpt": {"family", "n_layer", "d_model", "n_head", "seq_len", "vocab_size", "description"},
}
"""The fields each family's preset holds: any other is a typo, refused."""


def _preset(name: str, r: Reader) -> Preset:
    family = r.string("family", choices=tuple(_KEYS))
    unknown = sorted(set(r.data) - _KEYS[family])
    if unknown:
        raise SchemaError(f"unknown field(s) {', '.join(unknown)} for a {family} preset", field=r.path)
    description = r.string("description", "")
    if family == "mlp":
        return MlpPreset(name=name, hidden_sizes=r.integers("hidden_sizes", minimum=1), description=description)
    preset = GptPreset(
        name=name,
        n_layer=r.integer("n_layer", minimum=1),
        d_model=r.integer("d_model", minimum=1),
        n_head=r.integer("n_head", minimum=1),
        seq_len=r.integer("seq_len", minimum=1),
        vocab_size=r.integer("vocab_size", minimum=1),
        description=description,
    )
    if preset.d_model % preset.n_head:
        raise SchemaError(f"d_model {preset.d_model} is not divisible by n_head {preset.n_head}", field=r.path)
    return preset


def get_preset(name: str) -> Preset:
    """The preset called name, or a SchemaError listing the known ones."""
    presets = load_presets()
    if name not in presets:
        known = ", ".join(sorted(presets))
        raise SchemaError(f"unknown model preset {name!r}; known presets: {known}", field="model.preset")
    return presets[name]
