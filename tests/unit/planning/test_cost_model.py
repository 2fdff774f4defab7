"""Step time, duration and cost, hand-worked from the figures in data/ (prices, peaks, MFU, bandwidths).

Figures used below: startup 300 s billed; step overhead 4 ms on a GPU, 1 ms on a CPU; half of communication hidden;
H100 989 TFLOP/s bf16 at 35 % MFU, NVLink 450 GB/s; e2 20 GFLOP/s per vCPU at 10 %; prices (us-central1, on demand):
e2-standard-4 $0.1541, a3-highgpu-1g $1.6206 and a3-highgpu-8g $12.9646 + $9.797 per H100, n1-highcpu-16 $0.6518.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from functions.planning import PlanInput, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.space import VARIANTS
from tests.unit.planning.outcomes import chosen

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
GPT_124M = 124_439_808
GPT_1_3B = 1_213_321_216
GPT_7B = 6_461_988_864
GPT_350M_FLOPS = 2_482_816_155_648  # per sample, as the planner counts it (schemas/data/throughput_points.json)


def _h100_mfu(samples_per_second: float) -> float:
    """The MFU of a measured gpt-350m x8 run on one H100 in the planner's terms: its step less 4 ms of overhead."""
    return 8 * GPT_350M_FLOPS / (989e12 * (8 / samples_per_second - 0.004))


# Past the largest work measured on an H100 (gpt-350m x8: 74.85 and 75.27 samples/s), the level fitted there: the
# two runs' geometric mean.
H100_TOP_EFFECTIVE = 989e12 * math.sqrt(_h100_mfu(74.85) * _h100_mfu(75.27))


def test_tiny_tabular_job_runs_on_a_cheap_cpu_machine():
    inp = PlanInput(
        task="tabular-classification", preset="mlp-small", dataset_bytes=48_213, epochs=5, batch_size=64, spot="never"
    )
    plan = chosen(plan_request(inp, now=NOW))
    rows = 48_213 // ((32 + 1) * 8)  # 182 rows of 32 features + label, 8 bytes per CSV value
    steps = math.ceil(rows / 64) * 5  # 15
    step = 64 * 6 * 6_402 / (4 * 20e9 * 0.10) + 0.001
    hours = (300 + steps * step) / 3600
    assert (plan.machine_type, plan.accelerator_type, plan.accelerator_count) == ("e2-standard-4", None, 0)
    assert (plan.region, plan.spot, plan.strategy, plan.precision) == ("us-central1", False, "ddp", "fp32")
    assert plan.estimated_steps == 15
    assert plan.estimated_step_time_seconds == pytest.approx(step, rel=1e-6)
    assert plan.hourly_cost_usd == pytest.approx(0.1541)
    assert plan.estimated_cost_usd == pytest.approx(hours * 0.1541, abs=1e-6)


def test_gpt_124m_on_one_h100():
    inp = PlanInput(
        task="causal-lm",
        preset="gpt-124m",
        dataset_bytes=10**8,
        epochs=1,
        batch_size=16,
        gpu_allowlist=("NVIDIA_H100_80GB",),
        max_gpus=1,
        spot="never",
        regions=("us-central1",),
        flex_start="allowed",  # a3-highgpu-1g is sold as Spot or Flex-start only (consumption.json)
    )
    plan = chosen(plan_request(inp, now=NOW))
    assert plan.scheduling_strategy == "FLEX_START"  # priced at on-demand rates
    steps = math.ceil(math.ceil(10**8 / 1024) / 16)  # 97,657 sequences -> 6,104 steps
    flops = 1024 * (6 * (12 * (12 * 768**2 + 13 * 768) + 768 * 50257) + 12 * 12 * 768 * 1024)
    step = 16 / 152.77  # a measured point (gpt-124m x16 on one H100, 152.77 samples/s): the plan's step is its step
    assert 16 * flops / (989e12 * load_catalog().throughput.mfu("NVIDIA_H100_80GB", 16 * flops)) + 0.004 == (
        pytest.approx(step, rel=1e-9)
    )
    hours = (300 + steps * step) / 3600
    assert (plan.machine_type, plan.accelerator_count, plan.replica_count) == ("a3-highgpu-1g", 1, 1)
    assert (plan.strategy, plan.precision) == ("ddp", "bf16")
    assert plan.estimated_steps == 6_104
    assert plan.estimated_hours == pytest.approx(hours, abs=1e-6)
    assert plan.hourly_cost_usd == pytest.approx(1.6206 + 9.797)
    assert plan.estimated_cost_usd == pytest.approx(hours * 11.4176, abs=1e-5)
    # 16P states + 16 sequences of 1024 x (12*34*768 + 10*50257 + 4*768) activations + 1 GiB context, in one pass
    assert plan.memory.total_bytes == 16 * GPT_124M + 16 * 838_641_664 + 2**30
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps, plan.activation_checkpointing) == (16, 1, False)
    assert plan.memory.gpu_memory_bytes == 80 * 10**9
    assert plan.memory.usable_bytes == 72 * 10**9  # 10 % of the card kept free
    assert plan.prices_estimated  # the a3-highgpu-1g machine price is an estimate; the H100 price is not
    assert any("NVIDIA_H100_80GB us-central1: $9.7970/h (catalog" in note for note in plan.assumptions)


def _row(outcome, machine_type, nodes, variant, spot=0):
    ev = outcome.evaluation
    for c, cfg in enumerate(ev.space.configs):
        if cfg.shape.machine_type == machine_type and cfg.nodes == nodes:
            return ev, c, variant, spot
    raise AssertionError(f"{machine_type} x{nodes} not in the space")


def test_gpt_7b_fsdp_over_one_a3_highgpu_8g():
    inp = PlanInput(
        task="causal-lm",
        preset="gpt-7b",
        dataset_bytes=10**9,
        epochs=1,
        batch_size=8,
        gpu_allowlist=("NVIDIA_H100_80GB",),
        spot="never",
        regions=("us-central1",),
    )
    ev, c, v, s = _row(plan_request(inp, now=NOW), "a3-highgpu-8g", 1, VARIANTS.index((3, False)))
    steps = math.ceil(math.ceil(10**9 / 4096) / 8)  # 244,141 sequences -> 30,518 steps
    flops = 4096 * (6 * (32 * (12 * 4096**2 + 13 * 4096) + 4096 * 256) + 12 * 32 * 4096 * 4096)
    comm = 1.5 * (2 * 7 / 8 * (2 * GPT_7B) / 450e9)  # FULL_SHARD moves 1.5x a ring all-reduce over NVLink
    step = flops / H100_TOP_EFFECTIVE + 0.5 * comm + 0.004
    hours = (300 + steps * step) / 3600
    assert ev.reason[c, v, s] == 0
    assert ev.step[c, v] == pytest.approx(step, rel=1e-9)
    assert ev.hours[c, v, s] == pytest.approx(hours, rel=1e-9)
    assert ev.hourly[c, v, s] == pytest.approx(12.9646 + 8 * 9.797)
    assert ev.cost[c, v, s] == pytest.approx(hours * (12.9646 + 8 * 9.797), rel=1e-9)
    activations = 4096 * (32 * 34 * 4096 + 10 * 256 + 4 * 4096)
    gathered = 2 * (12 * 4096**2 + 13 * 4096) * 2
    assert ev.memory_total[c, v] == pytest.approx(2 * GPT_7B + activations + gathered + 2**30, rel=1e-12)
    assert ev.usable[c] == pytest.approx(0.9 * 80e9)
    assert (ev.micro_batch[c, v], ev.accumulation[c, v], ev.checkpointing[c, v]) == (1, 1, False)


def test_reduction_server_halves_cross_node_time_and_costs_its_machines():
    inp = PlanInput(
        task="causal-lm",
        preset="gpt-1.3b",
        dataset_bytes=10**9,
        epochs=1,
        batch_size=64,
        gpu_allowlist=("NVIDIA_H100_80GB",),
        spot="never",
        regions=("us-central1",),
    )
    outcome = plan_request(inp, now=NOW)
    ev, c, _, s = _row(outcome, "a3-highgpu-8g", 4, 0)
    ring, server = VARIANTS.index((0, False)), VARIANTS.index((0, True))
    grad = 2 * GPT_1_3B
    intra = 2 * 7 / 8 * grad / 450e9
    # a3-highgpu-8g: GPUDirect-TCPX's 800 Gbit/s needs NICs a Vertex custom job cannot attach: its primary NIC's 200
    network = 200e9 / 8
    exposed_ring = 0.5 * (intra + 2 * 3 / 4 * grad / network)
    exposed_server = 0.5 * (intra + grad / network)
    assert ev.step[c, ring] - ev.step[c, server] == pytest.approx(exposed_ring - exposed_server, rel=1e-9)
    servers = math.ceil(4 * 200 / 32)  # 25 x n1-highcpu-16 at ~32 Gbit/s
    assert ev.space.server_replicas[c] == servers
    assert ev.hourly[c, server, s] == pytest.approx(4 * (12.9646 + 8 * 9.797) + servers * 0.6518)
    assert ev.hourly[c, ring, s] == pytest.approx(4 * (12.9646 + 8 * 9.797))


def test_spot_adds_the_preemption_overhead_and_uses_spot_prices():
    inp = PlanInput(
        task="causal-lm",
        preset="gpt-124m",
        dataset_bytes=10**8,
        epochs=1,
        batch_size=16,
        gpu_allowlist=("NVIDIA_H100_80GB",),
        max_gpus=1,
        spot="required",
        regions=("us-central1",),
    )
    plan = chosen(plan_request(inp, now=NOW))
    # a3-highgpu-1g is not sold on demand: without Spot it runs as Flex-start, at on-demand prices
    on_demand = chosen(plan_request(PlanInput(**{**vars(inp), "spot": "never", "flex_start": "allowed"}), now=NOW))
    assert plan.spot and not on_demand.spot
    # one machine at the prior 0.5 preemptions per machine-hour, each costing a start-up (300 s) and half the Spot
    # checkpoint interval (10 min / 2): load 0.5 x 1 x 600 / 3600, overhead load / (1 - load) = 1/11
    assert plan.estimated_hours == pytest.approx(on_demand.estimated_hours * (1 + 1 / 11), abs=2e-4)
    assert any(n.startswith("preemption: 0.5 per machine-hour (the prior 0.5/h") for n in plan.assumptions)
    assert any("x 1 machine(s) x 10 min lost each" in n and n.endswith("+9.1% time") for n in plan.assumptions)
    assert plan.hourly_cost_usd == pytest.approx(1.6206 * 0.30 + 9.797 * 0.35, abs=1e-4)
