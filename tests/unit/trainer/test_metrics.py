"""Model FLOPs, GPU peaks (from the planner's catalog) and MFU; the metrics.json document's shape."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.model_presets import GptPreset, get_preset
from schemas.run_metrics import resumed_from_step, stored_metrics
from trainer.metrics import EpochResult, flops_per_sample, metrics_document, model_flops_utilisation, peak_flops


@pytest.mark.parametrize(
    ("name", "precision", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989),
        ("NVIDIA A100-SXM4-40GB", "bf16", 312),
        ("Tesla T4", "fp16", 65),
        ("Tesla V100-SXM2-16GB", "fp16", 125),
        ("NVIDIA L4", "bf16", 121),
        ("Tesla T4", "bf16", None),  # T4 has no bf16
        ("NVIDIA L40S", "bf16", None),  # not in the catalog, and not to be mistaken for an L4
        ("cpu", "fp32", None),
    ],
)
def test_peak_flops_by_device_name(name: str, precision: str, tflops: float | None) -> None:
    expected = None if tflops is None else tflops * 1e12
    assert peak_flops(name, precision) == expected


def test_gpt_flops_follow_palm_and_mfu_divides_by_all_devices() -> None:
    preset = get_preset("gpt-124m")
    assert isinstance(preset, GptPreset)
    per_sequence = flops_per_sample(preset, preset.parameter_count())
    per_token = per_sequence / preset.seq_len
    assert per_token > 6 * preset.non_embedding_parameter_count()  # the attention term adds to 6N
    assert per_token < 6 * preset.parameter_count() + 12 * preset.n_layer * preset.d_model * preset.seq_len
    mfu = model_flops_utilisation(10.0, per_sequence, 989e12, devices=8)
    assert mfu == pytest.approx(10.0 * per_sequence / (989e12 * 8))
    assert model_flops_utilisation(10.0, per_sequence, None, devices=1) is None


def test_metrics_document_final_is_the_last_epoch() -> None:
    epochs = [EpochResult(1, 0.9, 0.6, None), EpochResult(2, 0.4, 0.97, None)]
    doc = metrics_document(
        task="tabular-classification",
        model="mlp-small",
        strategy="ddp",
        world_size=4,
        steps=80,
        epochs=epochs,
        samples_per_second=1234.5,
        tokens_per_second=None,
        wall_time_seconds=3.5,
        mfu=None,
    )
    assert doc["final"] == {"loss": 0.4, "accuracy": 0.97, "perplexity": None}
    assert doc["epochs"][0] == {"epoch": 1, "loss": 0.9, "accuracy": 0.6, "perplexity": None}
    assert (doc["schema_version"], doc["world_size"], doc["steps"]) == (1, 4, 80)
    assert doc["resumed_from_step"] == 0  # started fresh


def test_metrics_document_says_the_step_a_resumed_run_picked_up_from() -> None:
    fields: dict[str, Any] = {"task": "causal-lm", "model": "gpt-tiny", "strategy": "fsdp", "world_size": 2}
    rates: dict[str, Any] = {"samples_per_second": 10.0, "tokens_per_second": 640.0, "wall_time_seconds": 3.5}
    epochs = [EpochResult(1, 2.0, None, 7.4)]
    doc = metrics_document(**fields, steps=80, epochs=epochs, **rates, mfu=None, resumed_from_step=48)
    assert doc["resumed_from_step"] == 48
    kept, notes = stored_metrics(doc)  # as the listener keeps it on the run
    assert kept["resumed_from_step"] == 48 and resumed_from_step(kept) == 48 and notes == []
