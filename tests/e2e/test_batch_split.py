"""Through the whole local stack: a request pinned to 2 machines of 2 GPUs each (4 training processes, two per
node, gloo on CPU) with a global batch of 64 is planned, submitted and trained as micro-batch x processes x
accumulation = 64, and the run record says so twice: in its plan and in the trainer's metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.synthetic import separable_csv_shards
from schemas.training_request import parse_training_request
from tests.e2e.test_chain import _publish, terminal_run

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
PREFIX = "pinned/e2e-2x2/"  # no route watches it: the request below is the only one made for these files


def test_two_nodes_of_two_processes_train_the_global_batch_of_64_exactly(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    shards = separable_csv_shards(shards=4, rows_per_shard=400, seed=3)
    for i, text in enumerate(shards):
        landing_bucket.blob(f"{PREFIX}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    request = json.loads((EXAMPLES / "training_request.json").read_text())
    request["idempotency_key"] = "e2e-pinned-2x2-batch-64"
    request["dataset"] = {
        "uri": f"gs://{landing_bucket.name}/{PREFIX}",
        "object_count": len(shards),
        "total_bytes": sum(len(t) for t in shards),
        "formats": ["csv"],
    }
    # Exactly the 3 epochs asked for (min_steps 0): the split is what is tested, not the trainer's small-table floor.
    request["hyperparameters"].update(epochs=3, batch_size=64, extra={"min_steps": "0"})
    # g2-standard-24 carries 2 L4s; two of them make 2 nodes x 2 processes (the emulator starts one per GPU).
    request["constraints"].update(machine_type="g2-standard-24", replica_count=2, spot="never")
    _publish(local_stack, "landfall-training-requests", json.dumps(request).encode())

    doc = terminal_run(firestore_runs, parse_training_request(json.dumps(request)).run_id, timeout_s=420)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    plan = doc["plan"]
    assert (plan["machine_type"], plan["accelerator_count"], plan["replica_count"]) == ("g2-standard-24", 2, 2)
    processes = plan["accelerator_count"] * plan["replica_count"]
    assert plan["micro_batch_size"] * processes * plan["gradient_accumulation_steps"] == 64
    batch = doc["metrics"]["batch"]
    assert batch == {
        "global_batch_size": 64,
        "processes": 4,
        "micro_batch_size": plan["micro_batch_size"],
        "gradient_accumulation_steps": plan["gradient_accumulation_steps"],
    }
    assert doc["metrics"]["world_size"] == 4
    assert doc["metrics"]["final"]["accuracy"] >= 0.9
