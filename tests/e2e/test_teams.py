"""Teams through the local stack (issue 26 item 4, Done-when 3): the stack's teams file (tests/e2e/teams.toml, given
through LANDFALL_TEAMS_FILE) caps team e2e-capped at 1 GPU in flight and has team e2e-spent's month already spent.
On the own-image route (a standard-library container: no training cost): a run past the cap WAITS team-cap while the
team's first run holds its GPU, a run needing more GPUs than the cap alone is REJECTED team-limit, a run of the spent
team WAITS team-budget, a request published on e2e-capped's own requests topic for the other team's data is REJECTED
team-prefix, and `landfall teams --json` shows each team's use against its limits.

A run over its own constraints.budget_usd while running is cancelled by the reconciler: that is shown through the
real adapters in tests/integration/test_team_budget_emulators.py with the reconciler's clock moved on, since the
planner only accepts a budget that covers the plan's estimate, start-up included (minutes), and an e2e test has
seconds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.commands.submit import code_request, publish
from schemas.training_request import parse_training_request
from tests.polling import wait_for

from .conftest import OWN_IMAGE
from .test_chain import landfall, terminal_run


def _data(landing_bucket: Any, prefix: str) -> str:
    landing_bucket.blob(prefix + "part-0.csv").upload_from_string("a,b,label\n1,2,0\n3,4,1\n", content_type="text/csv")
    return f"gs://{landing_bucket.name}/{prefix}"


def _publish(data: str, *, gpus: int | None, seconds: int = 1, topic: str = "") -> str:
    """A request for the own image on `data` (1 or 2 L4 GPUs pinned, or a CPU machine), published (on the shared
    requests topic, or `topic`); its run id."""
    argv = ["submit", "--image", OWN_IMAGE, "--data", data, "--params", "1000", f"--arg=--seconds={seconds}"]
    if gpus:
        argv += ["--machine-type", "g2-standard-4" if gpus == 1 else "g2-standard-24", "--gpus", str(gpus)]
    body = json.dumps(code_request(build_parser().parse_args(argv))).encode()
    if topic:
        from google.cloud import pubsub_v1

        pubsub_v1.PublisherClient().publish(topic, body).result(timeout=30)
    else:
        publish(body)
    return parse_training_request(body).run_id


def _state(runs: Any, run_id: str, *states: str) -> dict[str, Any] | None:
    snap = runs.document(run_id).get()
    doc = snap.to_dict() if snap.exists else None
    return doc if doc is not None and doc["state"] in states else None


def test_team_cap_budget_and_hard_limit_through_the_stack(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.cloud import firestore

    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    # Team e2e-spent has spent its month already (as settled runs would have): its next run waits for budget.
    month = datetime.now(UTC).strftime("%Y-%m")
    ledgers = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("teams")
    ledgers.document("e2e-spent").set(
        {
            "schema_version": 1,
            "team": "e2e-spent",
            "gpus": {},
            "months": {month: {"reserved_usd": 0.0, "settled_usd": 1.0, "runs": 3}},
            "updated_at": "",
        }
    )
    holding = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-a/"), gpus=1, seconds=60)
    wait_for(lambda: _state(firestore_runs, holding, "SUBMITTED", "RUNNING"), 60, f"run {holding} to be submitted")

    over_cap = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-b/"), gpus=1)
    too_big = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-c/"), gpus=2)
    broke = _publish(_data(landing_bucket, f"own-image/team-spent/{stamp}-d/"), gpus=None)
    project = local_stack.env["GOOGLE_CLOUD_PROJECT"]
    own_topic = f"projects/{project}/topics/landfall-requests-e2e-capped"
    trespass = _publish(_data(landing_bucket, f"own-image/team-spent/{stamp}-e/"), gpus=None, topic=own_topic)

    waiting = wait_for(lambda: _state(firestore_runs, over_cap, "WAITING"), 60, f"run {over_cap} to wait")
    assert waiting["submission"]["waiting"]["reason"] == "team-cap"
    assert "e2e-capped" in waiting["submission"]["waiting"]["note"] and waiting["team"]["held"] is False
    rejected = terminal_run(firestore_runs, too_big, timeout_s=60)
    assert rejected["state"] == "REJECTED" and rejected["error"]["code"] == "team-limit", rejected.get("error")
    assert "cap of 1 GPUs (all)" in rejected["error"]["message"]
    spent = wait_for(lambda: _state(firestore_runs, broke, "WAITING"), 60, f"run {broke} to wait")
    assert spent["submission"]["waiting"]["reason"] == "team-budget"
    refused = terminal_run(firestore_runs, trespass, timeout_s=60)
    assert refused["state"] == "REJECTED" and refused["error"]["code"] == "team-prefix", refused.get("error")
    assert "team 'e2e-capped''s topic landfall-requests-e2e-capped" in refused["error"]["message"]

    code, out, _ = landfall(capsys, "teams", "--json")
    uses = {u["team"]: u for u in json.loads(out)}
    assert code == 0 and uses["e2e-capped"]["gpus"] == {"NVIDIA_L4": 1} and uses["e2e-capped"]["runs"] >= 1
    assert uses["e2e-capped"]["over"] == ["gpus all 1/1"]
    assert uses["e2e-spent"]["spent_usd"] == 1.0 and uses["e2e-spent"]["over"] == ["budget $1.00/$1.00"]
    code, out, _ = landfall(capsys, "teams")
    assert code == 0 and "e2e-capped" in out and "all 1/1" in out

    # Leave the shared stack as found: the waiting runs and the holding run are cancelled; the GPU is released once.
    for run_id in (over_cap, broke, holding):
        assert landfall(capsys, "cancel", run_id)[0] == 0
    for run_id in (over_cap, broke, holding):
        assert terminal_run(firestore_runs, run_id, timeout_s=60)["state"] == "CANCELLED"

    def released() -> dict[str, Any] | None:
        doc = ledgers.document("e2e-capped").get().to_dict()
        return doc if doc is not None and not doc["gpus"] else None

    wait_for(released, 30, "team e2e-capped's GPU to be released")
