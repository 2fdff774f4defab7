"""Bounded records, against the fakes: a run refused capacity everywhere for 200 rounds, the reconciler retrying it
each round through the dispatcher's exactly-once path, keeps every document Landfall writes for it (the run, its
dataset, the dataset version, its content, orphans) under DOCUMENT_BOUND_BYTES, measured as Firestore measures a
document (https://cloud.google.com/firestore/docs/storage-size). Older documents, stored before the bounds, still
read and are bounded at their next round; the CLI shows what was left out. The emulator's side:
tests/integration/test_record_bounds_emulators.py."""

from __future__ import annotations

import copy
import io
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from google.api_core import exceptions as gexc

from deploy.routes import Route
from deploy.topology import load_topology
from functions.dispatch.handler import attempt_policy
from functions.reconciler.cancel import cancel_run
from functions.reconciler.handler import ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.records.attempts import waited
from functions.records.bounds import stored_plan
from landfall.commands.runs import describe
from landfall.commands.watch import Watcher
from schemas.content_record import CONTENTS_SUBCOLLECTION
from schemas.plan import PlanAlternative
from schemas.record_bounds import (
    ALTERNATIVES_KEPT,
    ATTEMPTS_KEPT,
    DOCUMENT_BOUND_BYTES,
    DOCUMENT_LIMIT_BYTES,
    HISTORY_HEAD,
    HISTORY_TAIL,
    STORED_BOUNDS,
    document_size,
    value_size,
)
from schemas.run_record import RunState, StateChange, parse_run_record
from schemas.times import parse_timestamp
from tests.fakes import ingest
from tests.fakes.orphans import FakeOrphans
from tests.fakes.world import PLAN, SETTINGS, Outcome, World

TOPOLOGY = load_topology()
ROUNDS = 200
REGIONS = ("us-central1", "europe-west4", "asia-east1")
# Named as the shipped route that owns datasets/: the dispatcher takes ingest's `landfall-route` label only when it
# names the route that owns the data.
ROUTE = Route(
    name="default-tabular", bucket="*", prefix="datasets/", task="tabular-classification", model_preset="mlp-small"
)
NEVER = 10**9
"""LANDFALL_WAIT_GIVE_UP_SECONDS for a run that waits 200 rounds (the default gives up after a day)."""


def test_the_size_is_firestore_s_own_example() -> None:
    """Google's worked example: users/jeff/tasks/my_task_id with four fields is 147 bytes."""
    doc = {"type": "Personal", "done": False, "priority": 1, "description": "Learn Cloud Firestore"}
    assert value_size(doc) == 71
    assert document_size("users/jeff/tasks/my_task_id", doc) == 147
    assert value_size({"at": parse_timestamp("2026-11-22T12:00:00Z"), "x": 1.5, "n": None, "l": ["ab", 2]}) == (
        3 + 8 + 2 + 8 + 2 + 1 + 2 + 3 + 8
    )


def _sizes(w: World, landing: ingest.World, orphans: FakeOrphans) -> dict[str, int]:
    """The size of every document Landfall has written, by path."""
    docs: dict[str, dict[str, Any]] = {f"{TOPOLOGY.runs_collection}/{k}": v for k, v in w.runs.docs.items()}
    docs |= {f"{TOPOLOGY.datasets_collection}/{k}": v for k, v in landing.datasets.docs.items()}
    docs |= {f"{TOPOLOGY.dataset_versions_collection}/{k}": v for k, v in landing.datasets.versions.items()}
    docs |= {
        f"{TOPOLOGY.datasets_collection}/{d}/{CONTENTS_SUBCOLLECTION}/{c}": v
        for (d, c), v in landing.datasets.contents.items()
    }
    docs |= {f"{TOPOLOGY.orphans_collection}/{k}": v for k, v in orphans.docs.items()}
    return {path: document_size(path, doc) for path, doc in docs.items()}


def refused_everywhere(rounds: int = ROUNDS) -> tuple[World, ingest.World, FakeOrphans, ReconcilerDeps, str]:
    """A dataset landed, its request delivered, every plan refused for capacity for `rounds` rounds after round 0:
    the run WAITING after round 0."""
    w = World()
    w.dispatch_deps = replace(w.dispatch_deps, settings=replace(SETTINGS, wait_give_up_seconds=NEVER))
    landing = ingest.World((ROUTE,))
    landing.clock.now = w.clock.now
    landing.upload("datasets/a/part-0.csv", b"x,label\n1,0\n")
    assert landing.upload("datasets/a/_SUCCESS", b"").startswith("published:")
    for region in REGIONS:
        w.vertex.refuse(region, *(gexc.ResourceExhausted(f"Quota exceeded in {region}") for _ in range(rounds + 1)))
    assert w.deliver(landing.published[0]) == "waiting:no-capacity"
    (run_id,) = w.runs.docs
    orphans = FakeOrphans()
    orphan_deps = OrphanDeps(store=orphans, runs=w.runs.get_many, regions=REGIONS, cancel=True, grace_seconds=120)
    deps = replace(w.reconciler_deps(), orphans=orphan_deps)
    return w, landing, orphans, deps, run_id


def next_round(w: World, deps: ReconcilerDeps, run_id: str) -> None:
    """The reconciler's pass once the run's retry time has come: one more round, refused everywhere."""
    wait = w.run(run_id).submission.waiting
    assert wait is not None
    w.clock.now = parse_timestamp(wait.retry_at)
    assert _reconcile(deps) == "resubmitted=1"
    assert w.run(run_id).state == RunState.WAITING


def test_200_rounds_of_refusals_keep_every_document_under_its_bound() -> None:
    w, landing, orphans, deps, run_id = refused_everywhere()
    largest: dict[str, int] = {}
    after: dict[int, int] = {}
    for number in range(1, ROUNDS + 1):
        next_round(w, deps, run_id)
        sizes = _sizes(w, landing, orphans)
        for path, size in sizes.items():
            largest[path] = max(largest.get(path, 0), size)
            assert size < DOCUMENT_BOUND_BYTES, f"round {number}: {path} is {size} bytes"
        after[number] = sizes[f"{TOPOLOGY.runs_collection}/{run_id}"]
    assert DOCUMENT_BOUND_BYTES < DOCUMENT_LIMIT_BYTES // 4 + 1
    assert len(largest) >= 4  # the run, the dataset, its version and content
    # Bounded, not merely slow: past the rounds kept in full the run stops growing (a few bytes of counts aside).
    assert after[ROUNDS] - after[ROUNDS // 2] < 100, after

    run = w.run(run_id)
    assert len(w.vertex.create_calls) == 3 * (ROUNDS + 1)
    counted = run.submission.refusals
    assert counted is not None and (counted.rounds, counted.refused) == (ROUNDS + 1, 3 * (ROUNDS + 1))
    assert counted.by_reason == {"capacity: quota exhausted": 3 * (ROUNDS + 1)}
    assert "us-central1" in counted.first and "asia-east1" in counted.last and counted.first_at < counted.last_at
    attempts = run.submission.attempts or ()
    assert len(attempts) == ATTEMPTS_KEPT + 1 and counted.attempts_omitted == 3 * (ROUNDS + 1) - len(attempts)
    assert attempts[0].round == 0 and attempts[-1].round == ROUNDS
    entries = 4 + 2 * ROUNDS  # RECEIVED, PLANNED, SUBMITTING, WAITING, then SUBMITTING and WAITING a round
    assert len(run.history) == HISTORY_HEAD + HISTORY_TAIL and run.history_omitted == entries - len(run.history)
    last = run.history[-1]
    assert last.state == RunState.WAITING and f"round {ROUNDS}: 3 x capacity: quota exhausted" in last.detail
    assert "Quota exceeded" not in last.detail  # the entry refers to the attempts instead of copying them
    wait = run.submission.waiting
    assert wait is not None and wait.tries == ROUNDS + 1 and f"in round {ROUNDS}:" in wait.reason
    assert all(f"Quota exceeded in {region}" in wait.reason for region in REGIONS)
    assert wait.reason.count("Quota exceeded") == 3  # this round's refusals, not every round's
    assert parse_run_record(copy.deepcopy(w.runs.docs[run_id])).to_document() == w.runs.docs[run_id]

    shown = describe(run)
    assert f"refusals  {3 * (ROUNDS + 1)} in {ROUNDS + 1} round(s): {3 * (ROUNDS + 1)} x capacity: quota exhausted" in (
        shown
    )
    assert f"{run.history_omitted} entries left out" in shown and f"... {run.history_omitted} more ..." in shown

    said = cancel_run(run_id, by="ops@example.com", store=w.runs, vertex=w.vertex, now=w.clock.now)  # type: ignore[arg-type]
    assert said == f"run {run_id} CANCELLED while it waited for capacity (no job was running)"
    ended = w.run(run_id)
    assert ended.error is not None and f"({3 * (ROUNDS + 1)} submission(s) refused)" in ended.error.message
    assert document_size(f"runs/{run_id}", w.runs.docs[run_id]) < DOCUMENT_BOUND_BYTES


def test_watch_goes_on_printing_new_entries_once_the_history_is_cut() -> None:
    w, _, _, deps, run_id = refused_everywhere()
    out = io.StringIO()
    watcher = Watcher(out)
    watcher.show(w.run(run_id), None)
    printed = out.getvalue().count("\n")
    for _ in range(HISTORY_TAIL):  # past the point where entries are left out
        next_round(w, deps, run_id)
        watcher.show(w.run(run_id), None)
        printed, before = out.getvalue().count("\n"), printed
        assert printed == before + 2, out.getvalue()[-400:]  # SUBMITTING and WAITING of each round, once each
    assert w.run(run_id).history_omitted
    assert f"round {HISTORY_TAIL}:" in out.getvalue().splitlines()[-1]


def test_a_watcher_that_missed_the_left_out_entries_says_so() -> None:
    w, _, _, deps, run_id = refused_everywhere()
    for _ in range(HISTORY_TAIL):
        next_round(w, deps, run_id)
    out = io.StringIO()
    Watcher(out).show(w.run(run_id), None)
    lines = out.getvalue().splitlines()
    assert len(lines) == HISTORY_HEAD + HISTORY_TAIL + 1
    assert f"{w.run(run_id).history_omitted} entries left out of the record" in lines[HISTORY_HEAD]


def test_a_document_stored_before_the_bounds_reads_and_is_bounded_at_its_next_round() -> None:
    """The old shape: attempts without a round, every refusal copied into each WAITING entry, no counts."""
    w, _, _, _, run_id = refused_everywhere()
    doc = copy.deepcopy(w.runs.docs[run_id])
    one = doc["submission"]["attempts"]
    for attempt in one:
        del attempt["round"]
    doc["submission"]["attempts"] = [copy.deepcopy(a) for _ in range(40) for a in one]
    del doc["submission"]["refusals"]
    copied = "; ".join(a["outcome"] for a in doc["submission"]["attempts"])
    doc["history"] += [
        {"state": s, "at": doc["history"][-1]["at"], "detail": copied if s == "WAITING" else "round n"}
        for _ in range(40)
        for s in ("SUBMITTING", "WAITING")
    ]
    old = parse_run_record(doc)
    assert old.submission.refusals is None and old.history_omitted is None and len(old.history) == 84
    assert old.to_document() == doc
    w.clock.now += timedelta(hours=1)
    history = (*old.history, StateChange(RunState.SUBMITTING, old.updated_at))
    back = replace(old, state=RunState.SUBMITTING, history=history)
    new = waited(back, "every plan refused", now=w.clock.now, policy=attempt_policy(w.dispatch_deps.settings))
    assert new is not None and new.state == RunState.WAITING
    assert len(new.history) == HISTORY_HEAD + HISTORY_TAIL and len(new.submission.attempts or ()) == ATTEMPTS_KEPT + 1
    assert new.submission.refusals is not None and new.submission.refusals.attempts_omitted == 120 - ATTEMPTS_KEPT - 1
    assert document_size(f"runs/{run_id}", new.to_document()) < document_size(f"runs/{run_id}", doc) / 4


def test_a_plan_stored_on_the_run_keeps_its_best_alternatives() -> None:
    alternatives = tuple(
        PlanAlternative(
            rank=i + 1,
            machine_type=f"n1-standard-{i}",
            accelerator_type=None,
            accelerator_count=0,
            replica_count=1,
            strategy="ddp",
            precision="fp32",
            region="us-central1",
            spot=False,
            reduction_server_replicas=0,
            estimated_hours=1.0,
            estimated_cost_usd=1.0 + i,
            memory_total_bytes=1,
            feasible=True,
            reason="costlier",
        )
        for i in range(25)
    )
    plan = replace(PLAN, alternatives=alternatives, alternatives_considered=26)
    w = World(Outcome(plan, (replace(plan, region="europe-west4"),)))
    assert w.deliver() == "submitted"
    run = w.run()
    assert run.plan is not None and run.plan.alternatives == alternatives[:ALTERNATIVES_KEPT]
    assert run.plan.alternatives_considered == 26
    assert all(len(p.alternatives) == ALTERNATIVES_KEPT for p in run.submission.fallbacks or ())
    assert stored_plan(PLAN) is PLAN
    assert "26 considered in all; the best 5 kept on the run, `landfall plan` lists the planner's full list" in (
        describe(run)
    )


def _nested(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {"loss": 0.5}
    for _ in range(levels):
        out = {"level": out}
    return out


def test_what_a_teams_code_writes_is_bounded_so_the_run_fits_after_a_long_wait() -> None:
    """A run that waited through a dozen rounds of refusals (its history and attempts at their bounds), whose job
    then wrote a 30-deep metrics.json with a 1.5 MB value, thousands of fields, nested arrays, NaN and a `data`
    section listing 3,000 objects: SUCCEEDED,
    every cut said in its warnings, and its document one Firestore takes, under DOCUMENT_BOUND_BYTES."""
    from tests.stored_limits import firestore_problems

    w, _, _, deps, run_id = refused_everywhere(rounds=HISTORY_TAIL // 2)
    for _ in range(HISTORY_TAIL // 2):
        next_round(w, deps, run_id)
    wait = w.run(run_id).submission.waiting
    assert wait is not None
    w.clock.now = parse_timestamp(wait.retry_at)
    assert _reconcile(deps) == "resubmitted=1"
    name = w.job_name(run_id)
    metrics = {
        "final": {"loss": float("nan"), "accuracy": 0.9, "note": "x" * 1_500_000},
        "deep": _nested(30),
        "curve": [[i, i / 2] for i in range(100)],
        "fields": {f"f{i}": i for i in range(5_000)},
        "data": {
            "object_count": 3_000,
            "total_bytes": 3_000,
            "objects_digest": "0" * 64,
            "source": "request",
            "objects": [{"name": f"part-{i:05d}.csv", "generation": "1", "size": 1} for i in range(3_000)],
        },
    }
    w.objects[f"{w.model_dir(run_id)}metrics.json"] = json.dumps(metrics)
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=w.clock.now, end=w.clock.now + timedelta(minutes=5))
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    run = w.run(run_id)
    doc = w.runs.docs[run_id]
    assert run.state == RunState.SUCCEEDED and len(run.history) == HISTORY_HEAD + HISTORY_TAIL
    assert firestore_problems(f"runs/{run_id}", doc) == []
    assert document_size(f"runs/{run_id}", doc) < DOCUMENT_BOUND_BYTES
    assert value_size(doc["metrics"]) <= STORED_BOUNDS.size
    said = "\n".join(run.warnings)
    for cut in ("metrics.final.loss = nan", "cut to 2,000 characters (first: metrics.final.note, 1,500,000", "deeper"):
        assert cut in said, said
    assert "nested arrays" in said and f"under {STORED_BOUNDS.size:,} bytes" in said
    assert run.metrics is not None and run.metrics["final"]["accuracy"] == 0.9
    assert run.data_read is not None and run.data_read.object_count == 3_000 and run.data_read.objects == ()
    assert "metrics.data.objects left out: 3000 objects past 65,536 bytes" in said
