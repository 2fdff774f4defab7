"""Teams through the local stack (docs/teams.md): the stack's teams file (tests/e2e/teams.toml, given
through LANDFALL_TEAMS_FILE) caps team e2e-capped at 1 GPU in flight and has team e2e-spent's month already spent.
On the own-image route (a standard-library container: no training cost): a run past the cap WAITS team-cap while the
team's first run holds its GPU, a run needing more GPUs than the cap alone is REJECTED team-limit, a run of the spent
team WAITS team-budget, a request published on e2e-capped's own requests topic for the other team's data is REJECTED
team-prefix, and `landfall teams --json` shows each team's use against its limits. With every T4 refused for quota,
a run of team e2e-no-l4 (its L4 cap 0) never falls back to an L4, while the same request on data no team owns does.

A run over its own constraints.budget_usd while running is cancelled by the reconciler, with that reason. The
planner accepts only a budget that covers the plan's estimate, and its model's start-up alone is minutes; so the test
seeds the workload's measured figures (as a finished run of it would have recorded them: seconds of start-up), plans
the request as the dispatcher will, gives it a budget a few seconds above that estimate, and its container runs two
minutes. tests/integration/test_team_budget_emulators.py shows the same with the reconciler's clock moved on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.commands.submit import code_request, publish, team_topic
from schemas.training_request import parse_training_request
from tests.polling import wait_for

from .conftest import OWN_IMAGE
from .test_chain import landfall, terminal_run


def _data(landing_bucket: Any, prefix: str) -> str:
    landing_bucket.blob(prefix + "part-0.csv").upload_from_string("a,b,label\n1,2,0\n3,4,1\n", content_type="text/csv")
    return f"gs://{landing_bucket.name}/{prefix}"


def _publish(data: str, *, gpus: int | None, seconds: int = 1, topic: str = "", team: str = "") -> str:
    """A request for the own image on `data` (1 or 2 L4 GPUs pinned, or a CPU machine), published on the shared
    requests topic, or on `topic`, or on team `team`'s own topic as `landfall submit --team` finds it; its run id."""
    argv = ["submit", "--image", OWN_IMAGE, "--data", data, "--params", "1000", f"--arg=--seconds={seconds}"]
    if gpus:
        argv += ["--machine-type", "g2-standard-4" if gpus == 1 else "g2-standard-24", "--gpus", str(gpus)]
    body = json.dumps(code_request(build_parser().parse_args(argv))).encode()
    publish(body, topic or (team_topic(team) if team else ""))
    return parse_training_request(body).run_id


def _state(runs: Any, run_id: str, *states: str) -> dict[str, Any] | None:
    snap = runs.document(run_id).get()
    doc = snap.to_dict() if snap.exists else None
    return doc if doc is not None and doc["state"] in states else None


def _measured_request(
    local_stack: stack.StackInfo,
    data: str,
    params: int,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An own-image request on one L4 for `data` running two minutes, a workload of its own (`params`: no other
    test's runs have measured it, so the dispatcher reads the seeded figures fresh; a workload's measurements, once
    found, are kept by an instance for a few seconds: functions/gcp/measurements_store.py KEPT_FOR_S), with what a
    finished run of it on that shape would have recorded seeded (2 s of start-up, 2 short steps); the request and its
    plan as the dispatcher will plan it (the measured figures read from the stack's Firestore)."""
    from google.cloud import firestore

    from deploy.topology import load_topology
    from schemas.measurement import Measurement, workload_key, workload_label

    argv = ["submit", "--image", OWN_IMAGE, "--data", data, "--params", str(params), "--arg=--seconds=120"]
    argv += ["--machine-type", "g2-standard-4", "--gpus", "1", "--nodes", "1"]
    request = code_request(build_parser().parse_args(argv))
    seeded = Measurement(
        workload=workload_key(request),
        workload_label=workload_label(request),
        machine_type="g2-standard-4",
        accelerator_type="NVIDIA_L4",
        accelerator_count=1,
        nodes=1,
        image=OWN_IMAGE,
        run_id=f"seeded-{datetime.now(UTC).strftime('%H%M%S%f')}",
        source="run",
        measured_at=datetime.now(UTC).isoformat(),
        step_seconds=0.01,
        startup_seconds=2.0,
        steps=2,
    )
    db = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"])
    db.collection(load_topology().measurements_collection).document(seeded.measurement_id).set(seeded.to_document())
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    code, out, err = landfall(capsys, "plan", str(path), "--json", "--measured", "auto")
    assert code == 0, err
    plan: dict[str, Any] = json.loads(out)
    return request, plan


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
    holding = _publish(
        _data(landing_bucket, f"own-image/team-capped/{stamp}-a/"), gpus=1, seconds=60, team="e2e-capped"
    )
    wait_for(lambda: _state(firestore_runs, holding, "SUBMITTED", "RUNNING"), 60, f"run {holding} to be submitted")

    over_cap = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-b/"), gpus=1, team="e2e-capped")
    too_big = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-c/"), gpus=2, team="e2e-capped")
    broke = _publish(_data(landing_bucket, f"own-image/team-spent/{stamp}-d/"), gpus=None, team="e2e-spent")
    project = local_stack.env["GOOGLE_CLOUD_PROJECT"]
    own_topic = f"projects/{project}/topics/landfall-requests-e2e-capped"
    trespass = _publish(_data(landing_bucket, f"own-image/team-spent/{stamp}-e/"), gpus=None, topic=own_topic)
    # Anyone may publish on the shared topic: a request there for the team's data is never charged to it.
    outsider = _publish(_data(landing_bucket, f"own-image/team-capped/{stamp}-f/"), gpus=1)
    # Ingest starts a run from data dropped under the team's prefix (the own-image route's marker): charged to it.
    dropped = _data(landing_bucket, f"own-image/team-capped/{stamp}-g/")
    landing_bucket.blob(f"own-image/team-capped/{stamp}-g/_SUCCESS").upload_from_string("")

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
    stranger = terminal_run(firestore_runs, outsider, timeout_s=60)
    assert stranger["state"] == "REJECTED" and stranger["error"]["code"] == "team-caller", stranger.get("error")
    assert (
        "team 'e2e-capped' owns" in stranger["error"]["message"]
        and "landfall submit --team e2e-capped" in (stranger["error"]["message"])
    )
    assert stranger.get("team") is None

    def ingested() -> dict[str, Any] | None:
        from google.cloud.firestore_v1.base_query import FieldFilter

        found = list(firestore_runs.where(filter=FieldFilter("request.dataset.uri", "==", dropped)).limit(1).stream())
        doc = found[0].to_dict() if found else None
        return doc if doc is not None and doc["state"] not in ("RECEIVED", "PLANNED", "SUBMITTING") else None

    by_ingest = wait_for(ingested, 60, f"ingest's run of {dropped} to be decided")
    assert by_ingest["state"] != "REJECTED", by_ingest.get("error")
    assert by_ingest["team"]["name"] == "e2e-capped" and by_ingest["team"]["via"] == "route", by_ingest["team"]

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
    if _state(firestore_runs, by_ingest["run_id"], "WAITING"):  # a GPU plan waits for the team's one GPU
        assert landfall(capsys, "cancel", by_ingest["run_id"])[0] == 0
    terminal_run(firestore_runs, by_ingest["run_id"], timeout_s=60)
    for run_id in (over_cap, broke, holding):
        assert terminal_run(firestore_runs, run_id, timeout_s=60)["state"] == "CANCELLED"

    def released() -> dict[str, Any] | None:
        doc = ledgers.document("e2e-capped").get().to_dict()
        return doc if doc is not None and not doc["gpus"] else None

    wait_for(released, 30, "team e2e-capped's GPU to be released")


def test_a_run_over_its_own_budget_while_running_is_cancelled_with_that_reason(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    data = _data(landing_bucket, f"own-image/over-budget/{stamp}/")
    request, plan = _measured_request(local_stack, data, 1001, capsys, tmp_path)
    assert plan["estimated_hours"] * 3600 < 60, f"the seeded figures were not used: {plan}"
    # A budget the estimate fits in, which the job passes 3 s past its estimate, long before its two minutes.
    budget = plan["estimated_cost_usd"] + plan["hourly_cost_usd"] * 3 / 3600
    request["constraints"] = {**request.get("constraints", {}), "budget_usd": round(budget, 6)}
    body = json.dumps(request).encode()
    publish(body)
    run_id = parse_training_request(body).run_id

    # Whichever comes first ends it the same way: the reconciler's cancel (its cost so far passed the budget), or
    # Vertex stopping the job at its timeout, which the plan set at what the budget pays.
    ended = terminal_run(firestore_runs, run_id, timeout_s=100)
    assert ended["state"] == "CANCELLED", (ended["state"], ended.get("error"))
    assert ended["error"]["code"] == "budget-exceeded", ended.get("error")
    assert "constraints.budget_usd" in ended["error"]["message"] + ended["submission"].get("cancel", {}).get("by", "")
    assert ended["plan"]["estimated_cost_usd"] <= budget, "the planner accepted the budget it was given"
    assert ended["plan"]["timeout_seconds"] <= budget / plan["hourly_cost_usd"] * 3600 + 1


def _one_gpu(data: str, team: str = "") -> str:
    """A request for the own image on one GPU of the planner's choosing (first plan a T4, then T4, L4, T4, P4
    shapes), published on the shared topic; its run id."""
    argv = ["submit", "--image", OWN_IMAGE, "--data", data, "--params", "1000", "--arg=--seconds=1", "--gpus", "1"]
    body = json.dumps(code_request(build_parser().parse_args(argv))).encode()
    publish(body, team_topic(team) if team else "")
    return parse_training_request(body).run_id


def test_a_fallback_to_a_gpu_kind_the_teams_cap_excludes_does_not_run_on_it(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, faults: str
) -> None:
    from deploy.vertex_emulator import control

    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    control.set_faults(faults, {"quota_exhausted": [{"accelerator_type": "NVIDIA_TESLA_T4"}]})
    team_run = _one_gpu(_data(landing_bucket, f"own-image/team-no-l4/{stamp}/"), team="e2e-no-l4")
    free_run = _one_gpu(_data(landing_bucket, f"own-image/no-team-l4/{stamp}/"))
    settled = ("SUCCEEDED", "FAILED", "CANCELLED", "REJECTED", "WAITING")
    team_doc = wait_for(lambda: _state(firestore_runs, team_run, *settled), 90, f"run {team_run} to settle")
    free_doc = terminal_run(firestore_runs, free_run, timeout_s=90)
    control.set_faults(faults, {})

    def created_on(doc: dict[str, Any]) -> list[str]:
        made = [a for a in doc["submission"]["attempts"] if a["outcome"] == "created"]
        return [a["plan"]["accelerator_type"] for a in made]

    def refused(doc: dict[str, Any]) -> list[str]:
        return [a["plan"]["accelerator_type"] for a in doc["submission"]["attempts"] if a["outcome"].startswith("cap")]

    # Data no team owns: the T4 plans are refused for quota and the run goes on to the L4 fallback.
    assert free_doc["state"] == "SUCCEEDED", free_doc.get("error")
    assert refused(free_doc) and set(refused(free_doc)) == {"NVIDIA_TESLA_T4"} and created_on(free_doc) == ["NVIDIA_L4"]
    # The team's run: the L4 fallbacks were never kept, and it ran on its next allowed plan.
    assert team_doc["team"]["name"] == "e2e-no-l4"
    kept = [p["accelerator_type"] for p in team_doc["submission"]["fallbacks"]]
    assert kept and "NVIDIA_L4" not in kept, kept
    tried = [
        (a["machine_type"], a["plan"]["accelerator_type"], a["outcome"][:120])
        for a in team_doc["submission"]["attempts"]
    ]
    assert team_doc["state"] == "SUCCEEDED", (team_doc["state"], tried, kept, team_doc["history"][-3:])
    assert set(refused(team_doc)) == {"NVIDIA_TESLA_T4"} and created_on(team_doc)
    assert "NVIDIA_L4" not in created_on(team_doc) and team_doc["plan"]["accelerator_type"] != "NVIDIA_L4"
    # A team's run writes under its team's folder (where its own trainer identity may write), its listing too.
    output = team_doc["artifacts"]["output_dir"]
    assert f"/runs/e2e-no-l4/{team_run}/" in output and f"/runs/{free_run}/" in free_doc["artifacts"]["output_dir"]
    from google.cloud import storage

    bucket, _, folder = output.removeprefix("gs://").partition("/")
    assert storage.Client().bucket(bucket).blob(f"{folder}data-files.jsonl").exists()


def test_a_teams_month_stops_a_run_that_runs_past_its_estimate(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    """Team e2e-month has a month of $0.003 (tests/e2e/teams.toml). A run estimated at a fraction of it (its
    workload's measured figures seeded: seconds of start-up) is admitted, and its container runs two minutes: the
    reconciler cancels it once the job's cost past its estimate takes the team's month to its budget, and the month
    ends above its budget by no more than a few seconds of the job's price (the pass's interval, 1 s here, and the
    cancel's way to the job's end)."""
    from google.cloud import firestore

    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    data = _data(landing_bucket, f"own-image/team-month/{stamp}/")
    request, plan = _measured_request(local_stack, data, 1002, capsys, tmp_path)
    db = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"])
    budget, hourly = 0.003, plan["hourly_cost_usd"]
    assert plan["estimated_cost_usd"] < budget / 2, f"the seeded figures were not used: {plan}"
    assert hourly * 120 / 3600 > 2 * budget and plan["timeout_seconds"] > 120, plan
    body = json.dumps(request).encode()
    publish(body, team_topic("e2e-month"))
    run_id = parse_training_request(body).run_id

    ended = terminal_run(firestore_runs, run_id, timeout_s=150)
    assert ended["state"] == "CANCELLED", (ended["state"], ended.get("error"))
    assert ended["error"]["code"] == "budget-exceeded", ended.get("error")
    assert "team 'e2e-month' reached its monthly budget $0.003 for" in ended["error"]["message"]
    ran = ended["timings"]["run_seconds"]
    assert ran < 60, f"stopped after {ran} s of its 120"

    def settled() -> dict[str, Any] | None:
        doc = db.collection("teams").document("e2e-month").get().to_dict()
        return doc if doc is not None and not doc["gpus"] else None

    ledger = wait_for(settled, 30, "team e2e-month's run to be settled")
    month = ledger["months"][ended["team"]["month"]]
    total = month["settled_usd"] + month["reserved_usd"]
    # What the job cost while the reconciler saw it under the budget, plus at most one pass (1 s) and the cancel's
    # way to the job's end: SIGTERM to the replica, its exit, the emulator's end time (a few seconds here).
    assert budget <= total <= budget + hourly * 10 / 3600, (total, month, ran)
