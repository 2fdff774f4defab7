"""Memory per GPU, hand-worked from the ZeRO paper's bytes per parameter and Korthikanti's activations.

Parameter counts follow the presets' formula: per block 12*d^2 + 13*d, plus vocab*d + seq*d embeddings and 2*d.
"""

from __future__ import annotations

import json

import pytest

from functions.planning import PlanInput
from functions.planning.catalog import load_catalog
from functions.planning.memory import breakdown, model_state_bytes
from functions.planning.workload import build_workload
from landfall.commands.planning import register

GPT_124M = 12 * (12 * 768**2 + 13 * 768) + 50257 * 768 + 1024 * 768 + 2 * 768  # 124,439,808: GPT-2 small
GPT_1_3B = 24 * (12 * 2048**2 + 13 * 2048) + 256 * 2048 + 2048 * 2048 + 2 * 2048  # 1,213,321,216
GPT_7B = 32 * (12 * 4096**2 + 13 * 4096) + 256 * 4096 + 4096 * 4096 + 2 * 4096  # 6,461,988,864
GPT_70B = 80 * (12 * 8192**2 + 13 * 8192) + 256 * 8192 + 4096 * 8192 + 2 * 8192  # 64,468,697,088
MLP_SMALL = (32 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2)  # 6,402 with 32 features and 2 classes


def test_hand_counts_match_the_presets():
    a = load_catalog().assumptions
    assert GPT_124M == 124_439_808 and GPT_1_3B == 1_213_321_216
    assert GPT_7B == 6_461_988_864 and GPT_70B == 64_468_697_088
    for preset, count, task in [
        ("gpt-124m", GPT_124M, "causal-lm"),
        ("gpt-1.3b", GPT_1_3B, "causal-lm"),
        ("gpt-7b", GPT_7B, "causal-lm"),
        ("gpt-70b", GPT_70B, "causal-lm"),
        ("mlp-small", MLP_SMALL, "tabular-classification"),
    ]:
        assert build_workload(PlanInput(task=task, preset=preset, dataset_bytes=10**6), a).parameters == count


# (model, parameters, strategy, GPUs, fp32, expected model-state bytes per GPU, worked as)
STATES = [
    ("mlp-small", MLP_SMALL, "ddp", 1, True, 102_432),  # 16 x 6,402
    ("gpt-124m", GPT_124M, "ddp", 1, False, 1_991_036_928),  # 16P
    ("gpt-124m", GPT_124M, "zero1", 4, False, 871_078_656),  # (4 + 12/4)P = 7P
    ("gpt-124m", GPT_124M, "fsdp", 2, False, 995_518_464),  # 16P/2
    ("gpt-1.3b", GPT_1_3B, "zero2", 8, False, 4_549_954_560),  # (2 + 14/8)P = 3.75P
    ("gpt-1.3b", GPT_1_3B, "fsdp", 8, True, 2_426_642_432),  # 16P/8 (fp32 Adam is 16P too)
    ("gpt-1.3b", GPT_1_3B, "zero2", 4, True, 8_493_248_512),  # fp32: (4 + 12/4)P = 7P
    ("gpt-7b", GPT_7B, "ddp", 8, False, 103_391_821_824),  # 16P: over any 80 GB card
    ("gpt-7b", GPT_7B, "zero1", 8, True, 58_157_899_776),  # fp32: (8 + 8/8)P = 9P
    ("gpt-7b", GPT_7B, "fsdp", 16, False, 6_461_988_864),  # 16P/16 = P
    ("gpt-70b", GPT_70B, "fsdp", 64, False, 16_117_174_272),  # 16P/64 = P/4
    ("gpt-70b", GPT_70B, "zero2", 32, False, 157_142_449_152),  # (2 + 14/32)P = 2.4375P
]


@pytest.mark.parametrize(("model", "parameters", "strategy", "gpus", "fp32", "expected"), STATES)
def test_model_states_per_gpu(model, parameters, strategy, gpus, fp32, expected):
    a = load_catalog().assumptions.memory
    got = breakdown(
        parameters, strategy, gpus, fp32, context_bytes=a.cuda_context_bytes, margin=a.safety_margin_fraction
    )
    assert got.model_states_bytes == expected


def test_one_gpu_every_strategy_keeps_sixteen_bytes_per_parameter():
    for strategy in range(4):
        assert float(model_state_bytes(1000, strategy, 1, 0)) == 16000.0


# (preset, strategy, GPUs, micro-batch, expected total bytes per GPU, worked as)
TOTALS = [
    # 124M, DDP, 1 GPU, 8 sequences: states 1,991,036,928 + activations 8 x 1024 x (12*34*768 + 10*50257 + 4*768)
    # = 6,709,133,312 + 1 GiB context = 9,773,912,064 (the 10 % margin is kept free of the card, not added)
    ("gpt-124m", "ddp", 1, 8, 9_773_912_064),
    # 7B, FSDP over 16, 1 sequence: states 6,461,988,864 + activations 4096 x (32*34*4096 + 10*256 + 4*4096)
    # = 18,331,205,632 + two gathered blocks 2 x 201,379,840 x 2 B = 805,519,360 + 1 GiB = 26,672,455,680
    ("gpt-7b", "fsdp", 16, 1, 26_672_455_680),
]


@pytest.mark.parametrize(("preset", "strategy", "gpus", "micro", "expected"), TOTALS)
def test_total_per_gpu_with_activations(preset, strategy, gpus, micro, expected):
    catalog = load_catalog()
    a = catalog.assumptions.memory
    work = build_workload(PlanInput(task="causal-lm", preset=preset, dataset_bytes=10**6), catalog.assumptions)
    got = breakdown(
        work.parameters,
        strategy,
        gpus,
        False,
        activation_per_sample=work.activation_bytes_per_sample,
        micro_batch=micro,
        largest_layer_parameters=work.largest_layer_parameters,
        context_bytes=a.cuda_context_bytes,
        margin=a.safety_margin_fraction,
    )
    assert got.total_bytes == expected
    assert got.model_states_bytes + got.activations_bytes + got.overhead_bytes == got.total_bytes
    assert (
        breakdown(1, "ddp", 1, False, context_bytes=0, margin=0.1, capacity_bytes=80 * 10**9).usable_bytes == 72 * 10**9
    )


def test_breakdown_rejects_unknown_strategy_and_zero_gpus():
    with pytest.raises(ValueError, match="strategy 'zero3' is not one of"):
        breakdown(10, "zero3", 1, False, context_bytes=0, margin=0.1)
    with pytest.raises(ValueError, match="GPU count must be >= 1"):
        breakdown(10, "ddp", 0, False, context_bytes=0, margin=0.1)


def _cli(argv, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr()


def test_estimate_memory_command_prints_model_states(capsys):
    code, out = _cli(["estimate-memory", "--params", "7B", "--strategy", "zero2", "--gpus", "8", "--json"], capsys)
    data = json.loads(out.out)
    assert code == 0
    assert data["model_states_bytes_per_gpu"] == 7_000_000_000 * (2 + 14 / 8)
    assert data["activations_bytes_per_gpu"] == 0
    code, out = _cli(
        ["estimate-memory", "--params", "1.3B", "--strategy", "ddp", "--gpus", "1", "--precision", "fp32", "--json"],
        capsys,
    )
    assert json.loads(out.out)["model_states_bytes_per_gpu"] == 16 * 1_300_000_000


def test_estimate_memory_with_a_preset_adds_activations_and_lists_cards(capsys):
    code, out = _cli(
        [
            "estimate-memory",
            "--params",
            "124M",
            "--strategy",
            "ddp",
            "--gpus",
            "1",
            "--preset",
            "gpt-124m",
            "--micro-batch",
            "8",
            "--json",
        ],
        capsys,
    )
    data = json.loads(out.out)
    assert code == 0
    assert data["activations_bytes_per_gpu"] == 6_709_133_312  # 10.0 GB in all: over a P4, under a T4
    assert "NVIDIA_TESLA_T4" in data["fits_on"] and "NVIDIA_TESLA_P4" not in data["fits_on"]


def test_estimate_memory_bad_count_is_a_clear_error(capsys):
    code, out = _cli(["estimate-memory", "--params", "lots", "--strategy", "ddp", "--gpus", "1"], capsys)
    assert code == 2
    assert "'lots' is not a count; write e.g. 124M" in out.err
