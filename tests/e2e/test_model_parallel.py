"""Model parallelism through the whole local stack: gpt-tiny pinned to tensor parallelism 2 inside each of 2
machines of 2 GPUs, and to 2 pipeline stages (one a machine) x 2 data-parallel processes (4 processes each, gloo on
CPU), each planned with its layout, submitted with the mesh in its arguments and environment, and SUCCEEDED; the loss
after the same steps matches a data-parallel run's (DDP, 2 processes on one machine) on the same data and seed. All
three have 2 data-parallel processes, so each step trains the same samples.

Tolerance: relative 2e-3. An L4 plan runs in bf16 (the CPU's autocast on the stack), about 3 significant digits per
matmul; the layouts compute the same sums in another order (a row-wise split adds partial products, a pipeline sums
its micro-batches' gradients), so the figures differ by that rounding (measured: 4.8e-4 under tensor parallelism,
2.3e-5 under the pipeline; the trainer's own layout tests, in fp32, agree to 1e-7), not by the 1e-2 or more that a
wrong split or a lost gradient moves a loss in 12 steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from schemas.training_request import parse_training_request
from tests import datagen
from tests.e2e.test_chain import _publish, terminal_run

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
PREFIX = "pinned/e2e-model-parallel/"  # no route watches it: the requests below are the only ones made for it
STEPS = 12


def _request(bucket: Any, key: str, replicas: int, tensor: int, pipeline: int) -> dict[str, Any]:
    request: dict[str, Any] = json.loads((EXAMPLES / "training_request.json").read_text())
    request.update(idempotency_key=key, task="causal-lm", model={"preset": "gpt-tiny"})
    names = [b.name for b in bucket.client.list_blobs(bucket, prefix=PREFIX)]
    request["dataset"] = {
        "uri": f"gs://{bucket.name}/{PREFIX}",
        "object_count": len(names),
        "total_bytes": sum(bucket.get_blob(n).size for n in names),
        "formats": ["txt"],
    }
    request["hyperparameters"].update(
        epochs=1,
        batch_size=8,
        learning_rate=0.003,
        seed=11,
        max_steps=STEPS,
        extra={"val_fraction": "0", "warmup_steps": "1"},
    )
    # g2-standard-24 carries 2 L4s: the emulator starts one process per GPU on each machine
    request["constraints"].update(
        spot="never",
        machine_type="g2-standard-24",
        replica_count=replicas,
        tensor_parallel=tensor,
        pipeline_parallel=pipeline,
    )
    return request


def test_tensor_and_pipeline_layouts_succeed_and_train_as_data_parallelism_does(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    for i in range(2):
        blob = landing_bucket.blob(f"{PREFIX}part-{i}.txt")
        if not blob.exists():
            blob.upload_from_string(datagen.text_corpus(600, seed=20 + i), content_type="text/plain")
    cases = {
        "data": _request(landing_bucket, "e2e-layout-data-parallel", 1, 1, 1),
        "tensor": _request(landing_bucket, "e2e-layout-tensor-2x2", 2, 2, 1),
        "pipeline": _request(landing_bucket, "e2e-layout-pipeline-2x2", 2, 1, 2),
    }
    for request in cases.values():
        _publish(local_stack, "landfall-training-requests", json.dumps(request).encode())
    docs = {
        name: terminal_run(firestore_runs, parse_training_request(json.dumps(r)).run_id, timeout_s=600)
        for name, r in cases.items()
    }
    for name, doc in docs.items():
        assert doc["state"] == "SUCCEEDED", (name, doc.get("error"))
    layouts = {
        name: (d["plan"]["tensor_parallel"], d["plan"]["pipeline_parallel"], d["plan"]["replica_count"])
        for name, d in docs.items()
    }
    assert layouts == {"data": (1, 1, 1), "tensor": (2, 1, 2), "pipeline": (1, 2, 2)}
    # every process ran: 2, 4 and 4 of them; the global batch split over the 2 data-parallel processes only
    assert [docs[n]["metrics"]["world_size"] for n in ("data", "tensor", "pipeline")] == [2, 4, 4]
    assert [docs[n]["metrics"]["batch"]["processes"] for n in ("data", "tensor", "pipeline")] == [2, 2, 2]
    for doc in docs.values():
        plan, batch = doc["plan"], doc["metrics"]["batch"]
        assert batch["micro_batch_size"] * batch["processes"] * batch["gradient_accumulation_steps"] == 8
        assert (batch["micro_batch_size"], batch["gradient_accumulation_steps"]) == (
            plan["micro_batch_size"],
            plan["gradient_accumulation_steps"],
        )
        assert doc["metrics"]["steps"] == STEPS
    baseline = docs["data"]["metrics"]["final"]["loss"]
    for name in ("tensor", "pipeline"):
        assert docs[name]["metrics"]["final"]["loss"] == pytest.approx(baseline, rel=2e-3), name
