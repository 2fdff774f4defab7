"""--tensor-parallel and --pipeline-parallel: parsed, recorded, checked against the model and the world size, and
the rank grid the device mesh lays out (pure logic; the training itself is tests/integration/trainer/test_layouts.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from schemas.model_presets import GptPreset, get_preset
from trainer.config import TrainConfig, parse_args
from trainer.distributed import Layout, layout_for
from trainer.errors import ConfigError
from trainer.models.gpt import GPT, qkv_head_major
from trainer.models.gpt_stage import GPTStage, stage_bounds

ARGS = [
    "--data-uri=/tmp/data",
    "--task=causal-lm",
    "--model=gpt-tiny",
    "--epochs=1",
    "--batch-size=8",
    "--learning-rate=0.001",
    "--seed=1",
]


def config(**changes: object) -> TrainConfig:
    base = TrainConfig(
        data_uri="/tmp/data", task="causal-lm", model="gpt-tiny", epochs=1, batch_size=8, learning_rate=1e-3, seed=1
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_flags_default_to_one_and_are_recorded() -> None:
    plain = parse_args(ARGS)
    assert (plain.tensor_parallel, plain.pipeline_parallel) == (1, 1)
    split = parse_args([*ARGS, "--tensor-parallel=2", "--pipeline-parallel=2"])
    assert (split.tensor_parallel, split.pipeline_parallel) == (2, 2)
    assert split.to_dict()["tensor_parallel"] == 2 and split.to_dict()["pipeline_parallel"] == 2


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"tensor_parallel": 0}, ["--tensor-parallel=0", ">= 1"]),
        ({"pipeline_parallel": -1}, ["--pipeline-parallel=-1", ">= 1"]),
        ({"tensor_parallel": 3}, ["--tensor-parallel=3", "4 attention heads", "1, 2, 4"]),
        ({"pipeline_parallel": 3}, ["--pipeline-parallel=3", "has 2", "--pipeline-parallel=2 or fewer"]),
        (
            {"task": "tabular-classification", "model": "mlp-small", "tensor_parallel": 2},
            ["--tensor-parallel=2", "MLP", "drop --tensor-parallel"],
        ),
        (
            {"task": "tabular-regression", "model": "mlp-small", "pipeline_parallel": 2},
            ["--pipeline-parallel=2", "MLP", "drop --pipeline-parallel"],
        ),
    ],
)
def test_bad_layouts_are_refused_saying_what_to_do(changes: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        config(**changes).validate()
    for word in words:
        assert word in str(raised.value)


def test_a_good_layout_passes() -> None:
    config(tensor_parallel=4, pipeline_parallel=2).validate()


def test_the_world_size_must_hold_whole_model_copies() -> None:
    with pytest.raises(ConfigError) as raised:
        config(tensor_parallel=2, pipeline_parallel=2).layout(6)
    message = str(raised.value)
    assert "--tensor-parallel=2 x --pipeline-parallel=2 = 4" in message and "6 processes" in message
    assert "4, 8, 12" in message
    with pytest.raises(ConfigError, match="--tensor-parallel=2"):
        config(tensor_parallel=2).batch_split(1)


def test_the_batch_is_split_over_the_data_parallel_degree() -> None:
    split = config(batch_size=16, tensor_parallel=2, pipeline_parallel=2, gradient_accumulation_steps=2).batch_split(8)
    assert (split.processes, split.micro_batch, split.accumulation) == (2, 4, 2)
    assert config(batch_size=16).batch_split(8).processes == 8  # no model parallelism: every process


def test_the_rank_grid_is_tensor_fastest_and_pipeline_outermost() -> None:
    layout = layout_for(8, tensor_parallel=2, pipeline_parallel=2)
    assert layout == Layout(2, 2, 2)
    grid = [layout.coordinates(rank) for rank in range(8)]
    assert grid == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert torch.equal(torch.arange(8).view(2, 2, 2)[1, 0, 1], torch.tensor(5))  # init_device_mesh's order
    assert [layout.data_rank(rank) for rank in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [rank for rank in range(8) if layout.counts_data(rank)] == [0, 2]  # one per data shard
    assert layout.to_dict() == {
        "tensor_parallel": 2,
        "pipeline_parallel": 2,
        "data_parallel": 2,
        "sequence_parallel": False,
    }


def _tiny() -> GptPreset:
    preset = get_preset("gpt-tiny")
    assert isinstance(preset, GptPreset)
    return preset


def test_stages_take_contiguous_blocks_and_keep_the_unsplit_names() -> None:
    assert stage_bounds(5, 2) == [range(0, 2), range(2, 5)]
    assert stage_bounds(4, 4) == [range(i, i + 1) for i in range(4)]
    torch.manual_seed(0)
    gpt = GPT(_tiny())
    whole = dict(gpt.named_parameters())
    first, last = GPTStage(gpt, 0, 2), GPTStage(gpt, 1, 2)
    names = set(dict(first.named_parameters())) | set(dict(last.named_parameters()))
    assert names == set(whole)
    assert {"wte.weight", "ln_f.weight"} <= set(dict(last.named_parameters()))
    assert torch.equal(dict(last.named_parameters())["wte.weight"], whole["wte.weight"])  # the tied copy starts equal
    idx = torch.randint(0, 256, (2, 64))
    with torch.no_grad():
        assert torch.allclose(last(first(idx)), gpt(idx), atol=1e-6)


def test_a_model_file_of_the_earlier_qkv_layout_is_reordered_head_major() -> None:
    """Version 1 model files hold qkv rows as all queries, all keys, all values; reordered, the same function."""
    preset = _tiny()
    torch.manual_seed(0)
    gpt = GPT(preset)
    d, heads = preset.d_model, preset.n_head
    old = {}
    for name, tensor in gpt.state_dict().items():
        if "attn.qkv" in name:  # head-major -> the earlier layout
            rest = tensor.shape[1:]
            tensor = tensor.view(heads, 3, d // heads, *rest).transpose(0, 1).reshape(tensor.shape)
        old[name] = tensor
    assert any(not torch.equal(old[k], v) for k, v in gpt.state_dict().items())
    restored = qkv_head_major(old, heads)
    assert all(torch.equal(restored[k], v) for k, v in gpt.state_dict().items())
