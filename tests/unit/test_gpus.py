"""The GPU table (schemas/data/gpus.json) and its one loader, shared by the planner's catalog and the trainer's MFU."""

from __future__ import annotations

import copy

import pytest

from schemas import vocabulary
from schemas.errors import SchemaError
from schemas.gpus import load_gpus, parse_gpus, read_gpus_json


def test_gpu_table_has_a_peak_per_precision_and_one_model_token_per_peak() -> None:
    table = load_gpus()
    assert table.version >= 1 and table.kinds
    for gpu in table.kinds.values():
        assert set(gpu.peak_tflops) == set(vocabulary.PRECISIONS)
        assert gpu.mixed_precision() in vocabulary.PRECISIONS
    by_model: dict[str, set[tuple]] = {}
    for gpu in table.kinds.values():  # the trainer matches torch's device name by model token: peaks must agree
        by_model.setdefault(gpu.model, set()).add(tuple(sorted(gpu.peak_tflops.items())))
    assert all(len(peaks) == 1 for peaks in by_model.values()), by_model


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda g: g["gpus"]["NVIDIA_L4"]["peak_tflops"].pop("fp16"),
            r"gpus\.json: gpus\.NVIDIA_L4\.peak_tflops: "
            "expected keys",
        ),
        (lambda g: g["gpus"]["NVIDIA_L4"]["peak_tflops"].update(fp32=None), r"peak_tflops\.fp32: every GPU needs"),
        (lambda g: g["gpus"]["NVIDIA_L4"].update(memory_gb=0), r"NVIDIA_L4\.memory_gb: expected a positive number"),
        (lambda g: g["gpus"]["NVIDIA_L4"].update(end_of_support="soon"), r"end_of_support: expected YYYY-MM-DD"),
        (lambda g: g.pop("version"), r"version: is required"),
    ],
)
def test_a_broken_gpu_table_names_the_kind_and_field(mutate, message: str) -> None:
    raw = copy.deepcopy(read_gpus_json())
    mutate(raw)
    with pytest.raises(SchemaError, match=message):
        parse_gpus(raw)


def test_the_planner_and_the_trainer_read_the_same_table() -> None:
    from functions.planning.catalog import load_catalog
    from trainer.metrics import peak_flops

    table = load_gpus()
    assert load_catalog().gpus == table.kinds
    h100 = table.kinds["NVIDIA_H100_80GB"]
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == h100.peak_flops("bf16")
