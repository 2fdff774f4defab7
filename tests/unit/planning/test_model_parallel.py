"""The model-parallel arithmetic (functions/planning/model_parallel.py) on the configurations of Korthikanti et al.
2022 (arXiv:2205.05198, Table 3: s = 2048; 22B: a 64, h 6144, t 8, micro-batch 4; 175B: a 96, h 12288; 530B: a 128,
h 20480; 1T: a 160, h 25600; t 8 and micro-batch 1 for the last three). The expected bytes per layer are worked by
hand below from Table 2's formulas (the paper plots them as shares of the tensor-parallel baseline, Figure 7, and
states the 5x reduction this test checks, rather than tabulating bytes)."""

from __future__ import annotations

import pytest

from functions.planning.model_parallel import (
    LayerShape,
    activation_bytes_per_layer,
    in_flight_micro_batches,
    pipeline_bubble,
    pipeline_bytes_per_micro_batch,
    stage_activation_bytes,
    state_bytes_per_gpu,
    tensor_parallel_bytes_per_layer,
)

PAPER = {
    # name: (shape, tensor-parallel baseline bytes, sequence parallel + selective recomputation bytes)
    # 22B: sbh = 2048*4*6144 = 50,331,648; 5as/h = 106.67; baseline sbh*(10 + 24/8 + 106.67/8) = sbh*79/3
    "22B": (LayerShape(2048, 4, 6144, 64), 1_325_400_064, 213_909_504),
    # 175B: sbh = 25,165,824; 5as/h = 80; baseline sbh*(13 + 10) = sbh*23; sp + selective sbh*34/8
    "175B": (LayerShape(2048, 1, 12288, 96), 578_813_952, 106_954_752),
    # 530B: sbh = 41,943,040; 5as/h = 64; baseline sbh*21
    "530B": (LayerShape(2048, 1, 20480, 128), 880_803_840, 178_257_920),
    # 1T: sbh = 52,428,800; 5as/h = 64; baseline sbh*21
    "1T": (LayerShape(2048, 1, 25600, 160), 1_101_004_800, 222_822_400),
}


@pytest.mark.parametrize("name", list(PAPER))
def test_per_layer_activations_match_the_paper_s_configurations_within_one_percent(name: str) -> None:
    shape, baseline, both = PAPER[name]
    assert activation_bytes_per_layer(shape, 8) == pytest.approx(baseline, rel=0.01)
    assert activation_bytes_per_layer(shape, 8, sequence_parallel=True, recompute="selective") == pytest.approx(
        both, rel=0.01
    )
    # the paper's headline: sequence parallelism with selective recomputation keeps about a fifth (16-20 %)
    assert 0.15 < both / baseline < 0.21
    assert activation_bytes_per_layer(shape, 8, recompute="full") == 2 * shape.sbh
    # each technique alone saves part: sequence parallelism the replicated 10 sbh, selective the 5as/h term
    alone_sp = activation_bytes_per_layer(shape, 8, sequence_parallel=True)
    alone_selective = activation_bytes_per_layer(shape, 8, recompute="selective")
    assert both < alone_sp < baseline and both < alone_selective < baseline


def test_without_parallelism_a_layer_keeps_34_sbh_plus_the_attention_scores() -> None:
    shape = LayerShape(1024, 2, 1024, 16)
    assert activation_bytes_per_layer(shape) == shape.sbh * (34 + 5 * 16 * 1024 / 1024)
    assert activation_bytes_per_layer(shape, sequence_parallel=True) == activation_bytes_per_layer(shape)
    with pytest.raises(ValueError, match="recompute must be one of"):
        activation_bytes_per_layer(shape, recompute="some")


def test_the_1f1b_pipeline_bubble_in_flight_activations_and_traffic() -> None:
    assert pipeline_bubble(1, 8) == 0.0
    assert pipeline_bubble(4, 4) == pytest.approx(3 / 7)
    assert pipeline_bubble(8, 64) == pytest.approx(7 / 71)  # more micro-batches, a smaller bubble
    assert in_flight_micro_batches(4, 16) == 4 and in_flight_micro_batches(4, 2) == 2
    shape = PAPER["175B"][0]
    per_layer = activation_bytes_per_layer(shape, 8, sequence_parallel=True, recompute="selective")
    # 96 layers over 8 stages: 12 layers a stage, 8 micro-batches in flight on the first
    assert stage_activation_bytes(shape, 96, 8, 64, 8, True, "selective") == 12 * per_layer * 8
    assert pipeline_bytes_per_micro_batch(shape) == 2 * shape.sbh * 2
    assert tensor_parallel_bytes_per_layer(shape, 1) == 0.0
    assert tensor_parallel_bytes_per_layer(shape, 8) == pytest.approx(4 * 2 * 7 / 8 * shape.sbh * 2)
    assert state_bytes_per_gpu(70 * 10**9, 16, 8, 4) == pytest.approx(70e9 * 16 / 32)
