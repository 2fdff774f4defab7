"""The local stack runs the trainer the way Google Cloud will: the CustomJob names the trainer image through
container_spec (the URI `landfall deploy` builds, with the local tag), and the Vertex emulator runs that image's
ENTRYPOINT from trainer/Dockerfile. The run still ends SUCCEEDED with metrics."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.images import trainer_entrypoint, trainer_image
from deploy.local import stack
from landfall.commands.demo import upload_dataset
from landfall.synthetic import separable_csv_shards
from schemas.training_request import run_id_for
from tests.e2e.test_chain import terminal_run

pytestmark = pytest.mark.e2e


def test_the_local_job_runs_the_deployed_image_through_container_spec(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    from functions.settings import get_settings
    from functions.wiring import vertex_jobs

    prefix = "datasets/e2e-container-spec/"
    generation = upload_dataset(landing_bucket.name, prefix, separable_csv_shards(shards=2, rows_per_shard=150))
    run_id = run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}")
    doc = terminal_run(firestore_runs, run_id)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["metrics"]["final"]["accuracy"] >= 0.8
    job = vertex_jobs()._client(doc["vertex"]["region"]).get_custom_job(name=doc["vertex"]["job_name"])
    expected = get_settings().trainer_image  # what the functions were started with: the local stack sets none
    assert expected == trainer_image().uri(local_stack.env["GOOGLE_CLOUD_PROJECT"], get_settings().default_region)
    for pool in job.job_spec.worker_pool_specs:
        if pool.replica_count:
            assert pool.container_spec.image_uri == expected
            assert not pool.container_spec.command, "the image's ENTRYPOINT runs, as in a real container"
            assert not pool.python_package_spec.python_module
    assert trainer_entrypoint() == ("python", "-m", "trainer.task")
