"""A preset named for a model size has about that many parameters (`gpt-124m` once had 86 M), counted the way
the planner and the trainer count them (schemas/model_presets.py)."""

from __future__ import annotations

import re

import pytest

from schemas.model_presets import GptPreset, load_presets

SIZE = re.compile(r"-(\d+(?:\.\d+)?)([mb])$")
UNIT = {"m": 1e6, "b": 1e9}
TOLERANCE = 0.10
"""The names round (gpt-1.3b is GPT-3 XL's shape with a byte vocabulary: 1.21 B)."""


def named_sizes() -> list[tuple[str, float]]:
    return [(name, float(m[1]) * UNIT[m[2]]) for name in load_presets() if (m := SIZE.search(name))]


def test_the_gpt_presets_are_named_for_a_size() -> None:
    assert {name for name, _ in named_sizes()} == {
        n for n, p in load_presets().items() if isinstance(p, GptPreset) and n != "gpt-tiny"
    }


@pytest.mark.parametrize(("name", "size"), named_sizes())
def test_a_preset_has_about_the_parameters_its_name_says(name: str, size: float) -> None:
    preset = load_presets()[name]
    assert isinstance(preset, GptPreset)
    count = preset.parameter_count()
    assert abs(count - size) <= TOLERANCE * size, f"{name} has {count:,} parameters"


def test_gpt_124m_is_gpt2_small() -> None:
    # GPT-2 small: 12 layers, d 768, n_ctx 1024, 50,257-token vocabulary, tied input/output embedding.
    preset = load_presets()["gpt-124m"]
    assert isinstance(preset, GptPreset)
    assert preset.parameter_count() == 124_439_808
