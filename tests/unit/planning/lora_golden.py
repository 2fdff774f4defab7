"""A LoRA fine-tune of a 70B model (0.2 % of its parameters train) planned on one pinned 8 x H100 machine, kept as a
golden file with the memory arithmetic written out: the frozen weights at the run's precision plus the adapters'
gradients and Adam states, each per GPU under the chosen sharding (tests/unit/planning/test_workload_figures.py).

Regenerate after a deliberate change to the memory model, the catalog or the wording with:

    .venv/bin/python -m tests.unit.planning.lora_golden
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions.planning import plan_input_from_request, plan_request
from functions.planning.memory import STATE_BYTES_PER_PARAM
from schemas.plan import Plan
from schemas.training_request import parse_training_request
from schemas.vocabulary import STRATEGY_INDEX

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
GOLDEN = Path(__file__).parents[1] / "golden" / "planner" / "lora.json"
PARAMETERS = 70_000_000_000
TRAINABLE = 140_000_000
"""0.2 % of the model: LoRA adapters of rank 64 or so on every attention and MLP projection of a 70B model."""
REQUEST: dict[str, Any] = {
    "idempotency_key": "lora-70b-golden",
    "dataset": {"uri": "gs://landfall-landing/instructions/"},
    "trainer": {"script": "gs://landfall-code/team/lora.py"},
    "workload": {
        "parameters": PARAMETERS,
        "trainable_parameters": TRAINABLE,
        "layers": 80,
        "hidden_size": 8192,
        "seq_len": 4096,
        "samples_per_epoch": 10_000,
    },
    "hyperparameters": {"batch_size": 32, "epochs": 1},
    "constraints": {"machine_type": "a3-highgpu-8g", "accelerator_count": 8, "replica_count": 1, "spot": "never"},
}


def lora_plan(request: dict[str, Any] = REQUEST) -> Plan | None:
    return plan_request(plan_input_from_request(parse_training_request(request)), now=NOW).plan


def weight_bytes(precision: str) -> int:
    """Bytes of one frozen weight at the run's precision."""
    return 4 if precision == "fp32" else 2


def arithmetic(plan: Plan) -> dict[str, Any]:
    """The plan's model states per GPU, term by term, from the parameter counts and the chosen sharding."""
    world = plan.accelerator_count * plan.replica_count
    fsdp = plan.strategy == "fsdp"
    fixed, sharded = STATE_BYTES_PER_PARAM[STRATEGY_INDEX[plan.strategy], int(plan.precision == "fp32")]
    frozen = PARAMETERS - TRAINABLE
    frozen_bytes = frozen * weight_bytes(plan.precision) / (world if fsdp else 1)
    trainable_bytes = TRAINABLE * (float(fixed) + float(sharded) / world)
    return {
        "gpus": world,
        "strategy": plan.strategy,
        "precision": plan.precision,
        "frozen_parameters": frozen,
        "frozen_weight_bytes_per_gpu": round(frozen_bytes),
        "frozen_rule": f"{frozen:,} x {weight_bytes(plan.precision)} bytes" + (f" / {world} GPUs" if fsdp else ""),
        "trainable_parameters": TRAINABLE,
        "trainable_state_bytes_per_gpu": round(trainable_bytes),
        "trainable_rule": f"{TRAINABLE:,} x ({float(fixed):g} + {float(sharded):g} / {world}) bytes (weights, "
        "gradients, Adam states)",
        "model_states_bytes": round(frozen_bytes + trainable_bytes),
        "full_fine_tune_states_bytes": round(PARAMETERS * (float(fixed) + float(sharded) / world)),
    }


def document() -> dict[str, Any]:
    plan = lora_plan()
    assert plan is not None, "the LoRA request is planned"
    return {
        "request": REQUEST,
        "arithmetic": arithmetic(plan),
        "plan": {
            "machine_type": plan.machine_type,
            "accelerator_type": plan.accelerator_type,
            "strategy": plan.strategy,
            "precision": plan.precision,
            "micro_batch_size": plan.micro_batch_size,
            "gradient_accumulation_steps": plan.gradient_accumulation_steps,
            "activation_checkpointing": plan.activation_checkpointing,
            "memory": plan.to_dict()["memory"],
            "estimated_step_time_seconds": plan.estimated_step_time_seconds,
            "estimated_hours": plan.estimated_hours,
            "estimated_cost_usd": plan.estimated_cost_usd,
            "sizing": [line for line in plan.assumptions if line.startswith("sizing:")],
        },
    }


def main() -> None:
    GOLDEN.write_text(json.dumps(document(), indent=2) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()
