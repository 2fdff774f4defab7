"""`make campaign` / `python -m tests.campaign`: trials in batches on one local stack of the campaign's own.

Each trial draws its fault from the seed (tests/campaign/faults.py), drops a small dataset, has its fault applied
while the dataset goes through ingest, dispatch, the Vertex emulator and the listener, and once everything is quiet
(its runs ended or waiting with a reason; the reconciler ticks every 2 s) its invariants are checked
(tests/campaign/invariants.py). A batch runs several trials at once: their faults overlap, so a violation names its
batch's trials and the command that replays that batch.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from schemas.training_request import run_id_for
from tests.campaign import faults as fault_table
from tests.campaign.checkpoint_trainer import CHECKPOINT_EVERY, START, STEP
from tests.campaign.faults import Fault, draw
from tests.campaign.invariants import (
    INVARIANTS,
    TrialFacts,
    Violation,
    check,
    delivery_violations,
    resumes,
    settled,
)
from tests.campaign.stack_control import CampaignStack, kill, replica_pids

REPO_ROOT = Path(__file__).resolve().parents[2]
RESTORE_AFTER_S = 15.0
"""Fault points stay armed this long after the drop (a crash point restarts its function clean once it fired)."""
VERTEX_FAULTS_FOR_S = 8.0
LONG_JOB_STEPS = 400
"""A Vertex-restart trial's job: 100 s at the campaign trainer's pace, still running when the batch's others ended."""
SPOT_JOB_STEPS = 160
"""A preemption trial's job: 40 s at the campaign trainer's pace, still training when the preemption is turned on."""
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"})
PREEMPTION_FROM_S = 150.0
"""The Spot preemption is turned on once every preemption trial's trainer logged a step past its first checkpoint
(or its run ended), or PREEMPTION_WAIT_S after the first did, at the latest this long after the drop; it stays on
until those runs ended, at most PREEMPTION_FOR_S. The other Vertex faults are on from the drop for
VERTEX_FAULTS_FOR_S."""
PREEMPTION_WAIT_S = 30.0
PREEMPTION_FOR_S = 240.0
SETTLE_TIMEOUT_S = 120.0
"""A trial not quiet this long after its batch's faults were lifted is a run-settles violation."""
JOB_EVENTS = ("Job completed successfully.", "Job is running.", "Waiting for job to be provisioned.")


@dataclass
class Trial:
    number: int
    fault: Fault
    prefix: str
    generation: str = ""
    notes: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    final_states: list[str] = field(default_factory=list)
    jobs: int = 0
    """Vertex jobs labelled with the trial's runs at the end."""
    resumes: list[tuple[int, int]] = field(default_factory=list)
    """(step, steps lost) of each start of its trainer from a checkpoint (invariants.resumes)."""

    @property
    def run_id(self) -> str:
        return run_id_for(f"gcs:{BUCKET}/{self.prefix}:{self.generation}")


BUCKET = "landfall-landing"


class Batch:
    def __init__(self, env: CampaignStack, seed: int, trials: list[Trial]) -> None:
        self.env, self.seed, self.trials = env, seed, trials
        self.errors: list[str] = []
        self._vertex_plan: dict[str, Any] = {}
        """The Vertex fault plan while it is on: a restarted emulator reads only its --faults file, so it is set
        again after `landfall restart vertex`."""
        self._vertex_lock = threading.Lock()

    # -- the dataset ----------------------------------------------------------------------------------------------
    def drop(self, trial: Trial) -> None:
        bucket = self.env.bucket()
        rows = "".join(f"{i % 7},{(i * trial.number) % 11},{i % 2}\n" for i in range(16))
        bucket.blob(f"{trial.prefix}part-0.csv").upload_from_string(f"a,b,label\n{rows}", content_type="text/csv")
        overrides: dict[str, Any] = {}
        if trial.fault.kind == "vertex_preemption":  # a run this short is planned on demand unless Spot is required
            overrides = {"constraints": {"spot": "required"}, "hyperparameters": {"max_steps": SPOT_JOB_STEPS}}
        if trial.fault.kind == "vertex_restart":  # a job still running once the batch's others ended (see act)
            overrides = {"hyperparameters": {"max_steps": LONG_JOB_STEPS}}
        if overrides:
            bucket.blob(f"{trial.prefix}landfall.json").upload_from_string(
                json.dumps(overrides), content_type="application/json"
            )
        marker = bucket.blob(f"{trial.prefix}_SUCCESS")
        marker.upload_from_string(b"")
        trial.generation = str(marker.generation)

    def uri(self, trial: Trial) -> str:
        return f"gs://{BUCKET}/{trial.prefix}"

    def wait_run(self, trial: Trial, states: set[str], timeout_s: float = 90.0) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run = self.env.run(trial.run_id)
            if run is not None and run.get("state") in states:
                return run
            time.sleep(0.5)
        return None

    # -- faults applied during the trial --------------------------------------------------------------------------
    def act(self, trial: Trial) -> None:
        f = trial.fault
        try:
            if f.kind == "function_restart":
                time.sleep(f.delay)
                self.env.restart(f.target)
                trial.notes.append(f"restarted {f.target}")
            elif f.kind == "object_event_storm":
                self._object_storm(trial)
            elif f.kind == "request_storm":
                self._request_storm(trial)
            elif f.kind == "job_event_storm":
                self._job_event_storm(trial)
            elif f.kind == "vertex_restart":
                # the emulator's restart stops every job it runs: once the batch's other runs have ended, so that it
                # hits this trial's (long) job and not the whole batch's
                self._wait_others_ended(trial)
                if self._wait_replica(trial):
                    self.env.restart("vertex")
                    with self._vertex_lock:
                        if self._vertex_plan:
                            self.env.set_vertex_faults(self._vertex_plan)
                    trial.notes.append("restarted vertex while the job's replica ran")
                else:
                    trial.notes.append("vertex restart not applied: no replica of the run was seen running")
            elif f.kind == "trainer_kill":
                self._trainer_kill(trial)
        except Exception as exc:  # a fault that could not be applied is reported, not a violation
            trial.notes.append(f"fault not applied: {exc.__class__.__name__}: {exc}")

    def _wait_others_ended(self, trial: Trial, timeout_s: float = 180.0) -> None:
        """Wait until every other trial of the batch whose fault is not a Vertex restart has its runs ended."""
        others = [t for t in self.trials if t is not trial and t.fault.kind != "vertex_restart"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._ended(t) for t in others):
                return
            time.sleep(1.0)

    def _object_storm(self, trial: Trial) -> None:
        name = f"{trial.prefix}_SUCCESS"
        data = {
            "kind": "storage#object",
            "bucket": BUCKET,
            "name": name,
            "generation": trial.generation,
            "size": "0",
            "contentType": "application/octet-stream",
        }
        attributes = {
            "bucketId": BUCKET,
            "objectId": name,
            "eventType": "OBJECT_FINALIZE",
            "payloadFormat": "JSON_API_V1",
            "objectGeneration": trial.generation,
        }
        for _ in range(trial.fault.count):
            self.env.publish(self.env.topology.notification_topic, json.dumps(data).encode(), **attributes)
        trial.notes.append(f"published the _SUCCESS notification {trial.fault.count} more times")

    def _request_storm(self, trial: Trial) -> None:
        deadline = time.monotonic() + 90
        request = None
        while time.monotonic() < deadline and request is None:
            request = next(
                (
                    v.get("request")
                    for v in self.env.versions(trial.prefix)
                    if v.get("status") == "PUBLISHED" and v.get("request")
                ),
                None,
            )
            time.sleep(0.5)
        if request is None:
            trial.notes.append("request storm not applied: no version was published")
            return
        body = json.dumps(request).encode()
        early = trial.fault.count // 2
        for _ in range(early):
            self.env.publish(self.env.topology.requests_topic, body)
        self.wait_run(trial, {"SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"})
        for _ in range(trial.fault.count - early):
            self.env.publish(self.env.topology.requests_topic, body)
        trial.notes.append(f"published its request {early} times in flight, {trial.fault.count - early} after")

    def _job_event_storm(self, trial: Trial) -> None:
        run = self.wait_run(trial, {"SUBMITTED", "RUNNING", "SUCCEEDED", "FAILED"})
        job_id = ((run or {}).get("vertex") or {}).get("job_id")
        if not job_id:
            trial.notes.append("job event storm not applied: the run never recorded a job")
            return
        project = self.env.env["GOOGLE_CLOUD_PROJECT"]
        for i in range(trial.fault.count):
            for text in JOB_EVENTS:  # newest first: reordered
                entry = {
                    "insertId": f"campaign-{trial.number}-{i}-{len(text)}",
                    "logName": f"projects/{project}/logs/ml.googleapis.com%2F{job_id}",
                    "resource": {
                        "type": "ml_job",
                        "labels": {"job_id": job_id, "project_id": project, "task_name": "service"},
                    },
                    "textPayload": text,
                    "severity": "INFO",
                    "timestamp": "2026-01-01T00:00:00Z",
                }
                self.env.publish(self.env.topology.job_events_topic, json.dumps(entry).encode())
        trial.notes.append(f"published its job's events {trial.fault.count} times, newest first")

    def _wait_replica(self, trial: Trial, timeout_s: float = 90.0) -> list[int]:
        """The run's replica processes once one runs; [] if none did before the run ended or timeout_s."""
        deadline, checked = time.monotonic() + timeout_s, time.monotonic()
        while time.monotonic() < deadline:
            pids = replica_pids(trial.run_id)
            if pids:
                return pids
            if time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                run = self.env.run(trial.run_id)
                if run is not None and run.get("state") in ("SUCCEEDED", "FAILED", "REJECTED", "CANCELLED"):
                    return []
            time.sleep(0.1)
        return []

    def _trainer_kill(self, trial: Trial) -> None:
        pids = self._wait_replica(trial)
        if pids:
            trial.notes.append(f"killed {kill(pids)} replica process(es)")
        else:
            trial.notes.append("trainer kill not applied: no replica process was found running")

    # -- fault points and Vertex faults, armed for the batch ------------------------------------------------------
    def arm(self) -> dict[str, int]:
        """Restart each function a fault point of the batch sits in with LANDFALL_FAULT_POINTS; set the Vertex
        faults. Returns, per armed service, where its log stood (a fault point that fires writes a line there)."""
        armed = fault_table.fault_points_env([t.fault for t in self.trials])
        offsets = {}
        for service, spec in armed.items():
            log = self.env.log_path(service)
            offsets[service] = log.stat().st_size if log.exists() else 0
            self.env.restart(service, {"LANDFALL_FAULT_POINTS": spec})
        plan = fault_table.vertex_plan([t.fault for t in self.trials])
        capacity = {k: v for k, v in plan.items() if k != "spot_preemption"}
        if capacity:
            self._set_vertex_plan(capacity)
        return offsets

    def disarm(self, armed: dict[str, int], started: float) -> None:
        """Restart each armed function clean once its fault point fired (functions-framework's gunicorn starts a
        crashed worker again, still armed) or RESTORE_AFTER_S passed; lift the Vertex faults (see below)."""
        plan = fault_table.vertex_plan([t.fault for t in self.trials])
        pending = dict(armed)
        spot = {k: v for k, v in plan.items() if k == "spot_preemption"}
        capacity_on = bool(plan) and plan != spot
        spot_trials = [t for t in self.trials if t.fault.kind == "vertex_preemption"]
        spot_phase = "waiting" if spot else "done"
        checked, first_ready = 0.0, None
        while pending or capacity_on or spot_phase != "done":
            elapsed = time.monotonic() - started
            changed = False
            if capacity_on and elapsed >= VERTEX_FAULTS_FOR_S:
                capacity_on, changed = False, True
            if spot_phase != "done" and time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                ready = [self._past_first_checkpoint(t) for t in spot_trials] if spot_phase == "waiting" else []
                if any(ready) and first_ready is None:
                    first_ready = elapsed
                if spot_phase == "waiting" and (
                    all(ready)
                    or elapsed >= PREEMPTION_FROM_S
                    or (first_ready is not None and elapsed - first_ready >= PREEMPTION_WAIT_S)
                ):
                    spot_phase, changed = "on", True
                    for t in spot_trials:
                        t.notes.append(f"Spot preemption on after {elapsed:.0f} s")
                elif spot_phase == "on" and (all(self._ended(t) for t in spot_trials) or elapsed >= PREEMPTION_FOR_S):
                    spot_phase, changed = "done", True
                    for t in spot_trials:
                        t.notes.append(f"Spot preemption lifted after {elapsed:.0f} s")
            if changed:
                self._set_vertex_plan(
                    {k: v for k, v in plan.items() if (spot_phase == "on" if k == "spot_preemption" else capacity_on)}
                )
            for service, offset in list(pending.items()):
                fired = _read_from(self.env.log_path(service), offset)[0].count("landfall fault point ")
                if fired or elapsed >= RESTORE_AFTER_S:
                    if fired:
                        time.sleep(1.0)  # let the redelivered messages meet the armed point again
                    self.env.restart(service)
                    for t in self.trials:
                        if t.fault.kind.endswith("_point") and fault_table.service_of(t.fault.target) == service:
                            t.notes.append(
                                f"{service}: fault points fired {fired} time(s); restarted clean after "
                                f"{time.monotonic() - started:.1f} s"
                            )
                    del pending[service]
            time.sleep(0.3)

    def _ended(self, trial: Trial) -> bool:
        return (
            bool(trial.generation) and (run := self.env.run(trial.run_id)) is not None and run.get("state") in TERMINAL
        )

    def _past_first_checkpoint(self, trial: Trial) -> bool:
        """The trial's trainer logged a step after its first checkpoint, or its run ended."""
        if self._ended(trial):
            return True
        job_id = (((self.env.run(trial.run_id) or {}).get("vertex")) or {}).get("job_id")
        if not job_id:
            return False
        steps = sum(1 for line in self.env.trainer_lines([str(job_id)]) if f'"message": "{STEP}"' in line)
        return steps > CHECKPOINT_EVERY

    def _set_vertex_plan(self, plan: dict[str, Any]) -> None:
        with self._vertex_lock:
            self._vertex_plan = plan
            self.env.set_vertex_faults(plan)

    # -- the batch --------------------------------------------------------------------------------------------
    def run(self) -> None:
        armed = self.arm()
        started = time.monotonic()
        drops = [threading.Thread(target=self.drop, args=(t,)) for t in self.trials]
        for d in drops:
            d.start()
        for d in drops:
            d.join()
        self.env.run(self.trials[0].run_id)  # the Firestore client made here: its first import is not thread-safe
        actors = [threading.Thread(target=self.act, args=(t,)) for t in self.trials]
        for a in actors:
            a.start()
        self.disarm(armed, started)
        for a in actors:
            a.join()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        facts = {t.number: self.facts(t) for t in self.trials}
        while time.monotonic() < deadline and not all(settled(f) for f in facts.values()):
            time.sleep(1.0)
            facts = {t.number: self.facts(t) for t in self.trials}
        time.sleep(1.0)  # late duplicates land on a quiet stack too
        for t in self.trials:
            final = self.facts(t, with_jobs=True)
            t.violations = check(final)
            t.final_states = sorted(str(r.get("state")) for r in final.runs)
            t.notes += [
                f"run {r.get('run_id')} FAILED: {(r.get('error') or {}).get('code')}: "
                f"{str((r.get('error') or {}).get('message'))[:300]}"
                for r in final.runs
                if r.get("state") == "FAILED"
            ]
            t.jobs = sum(len(j) for j in final.jobs.values())
            t.resumes = [r for lines in final.trainer_lines.values() for r in resumes(lines)]
            logged = [line for lines in final.trainer_lines.values() for line in lines]
            starts, steps = (sum(1 for line in logged if f'"message": "{m}"' in line) for m in (START, STEP))
            t.notes.append(f"its trainer started {starts} time(s) and logged {steps} step(s)")
            if t.fault.kind == "vertex_preemption":
                t.notes.append(f"planned on Spot: {[(r.get('plan') or {}).get('spot') for r in final.runs]}")

    def facts(self, trial: Trial, *, with_jobs: bool = False) -> TrialFacts:
        uri = self.uri(trial)
        runs = self.env.runs(uri)
        jobs, lines = {}, {}
        if with_jobs:
            for run in runs:
                jobs[str(run.get("run_id"))] = self.env.labelled_jobs(str(run.get("run_id")), _regions(run))
                lines[str(run.get("run_id"))] = self.env.trainer_lines(jobs[str(run.get("run_id"))])
        return TrialFacts(uri, self.env.dataset(trial.prefix), self.env.versions(trial.prefix), runs, jobs, lines)


def _regions(run: dict[str, Any]) -> set[str]:
    sub = run.get("submission") or {}
    plans = [run.get("plan") or {}, *(sub.get("fallbacks") or ())]
    regions = {p.get("region") for p in plans} | {a.get("region") for a in sub.get("attempts") or ()}
    regions |= {j.get("region") for j in sub.get("jobs") or ()}
    return {r for r in regions if r}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.campaign", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trials", type=int, default=300, help="how many trials (default 300)")
    p.add_argument("--seed", type=int, default=None, help="the campaign's seed (default: from the clock, printed)")
    p.add_argument("--first", type=int, default=0, help="number of the first trial (to replay a batch)")
    p.add_argument("--batch", type=int, default=25, help="trials run at once (default 25)")
    p.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / ".landfall/campaign/last.json",
        help="JSON summary (default .landfall/campaign/last.json)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=REPO_ROOT / ".landfall/campaign/stack",
        help="the campaign stack's own state folder (wiped at start and end)",
    )
    p.add_argument("--keep", action="store_true", help="leave the stack up at the end (to look at it)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    env = CampaignStack(args.state_dir)
    began = time.monotonic()
    print(
        f"fault campaign: seed {seed}, trials {args.first}..{args.first + args.trials - 1}, batches of "
        f"{args.batch}; starting its stack in {args.state_dir}",
        flush=True,
    )
    env.up()
    trials: list[Trial] = []
    batches: list[list[int]] = []
    log_offset = env.bridge_log().stat().st_size if env.bridge_log().exists() else 0
    delivery: list[tuple[list[int], Violation]] = []
    try:
        numbers = list(range(args.first, args.first + args.trials))
        for i in range(0, len(numbers), args.batch):
            chunk = [
                Trial(n, draw(seed, n), f"datasets/campaign-s{seed}-t{n:04d}/")
                for n in chunk_of(numbers, i, args.batch)
            ]
            t0 = time.monotonic()
            Batch(env, seed, chunk).run()
            text, log_offset = _read_from(env.bridge_log(), log_offset)
            delivery += [([t.number for t in chunk], v) for v in delivery_violations(text)]
            trials += chunk
            batches.append([t.number for t in chunk])
            bad = sum(1 for t in chunk if t.violations)
            print(
                f"batch {len(batches)}: trials {chunk[0].number}..{chunk[-1].number} in {time.monotonic() - t0:.0f}"
                f" s, {bad} with violations; states {Counter(s for t in chunk for s in t.final_states)}",
                flush=True,
            )
        time.sleep(20.0)  # a last look: messages still failing after every trial settled
        text, log_offset = _read_from(env.bridge_log(), log_offset)
        delivery += [(batches[-1] if batches else [], v) for v in delivery_violations(text)]
    finally:
        if not args.keep:
            env.down()
    wall = time.monotonic() - began
    summary = _summary(seed, args, trials, delivery, wall, env.restarts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    _print(summary)
    return 1 if summary["violations_total"] else 0


def chunk_of(numbers: list[int], start: int, size: int) -> list[int]:
    return numbers[start : start + size]


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    if not path.exists():
        return "", offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    return data.decode(errors="replace"), offset + len(data)


def _summary(
    seed: int,
    args: argparse.Namespace,
    trials: list[Trial],
    delivery: list[tuple[list[int], Violation]],
    wall: float,
    restarts: int,
) -> dict[str, Any]:
    per_invariant = Counter(v.invariant for t in trials for v in t.violations)
    per_invariant.update(v.invariant for _, v in delivery)
    violations = [
        {
            "trial": t.number,
            "seed": seed,
            "fault": t.fault.describe(),
            "invariant": v.invariant,
            "detail": v.detail,
            "notes": t.notes,
            "replay": _replay(seed, _batch_of(t.number, args), args.batch),
        }
        for t in trials
        for v in t.violations
    ]
    violations += [
        {
            "trials": batch,
            "seed": seed,
            "invariant": v.invariant,
            "detail": v.detail,
            "replay": _replay(seed, batch[0] if batch else 0, len(batch) or 1),
        }
        for batch, v in delivery
    ]
    return {
        "seed": seed,
        "trials": len(trials),
        "first": args.first,
        "batch": args.batch,
        "wall_seconds": round(wall, 1),
        "restarts": restarts,
        "per_fault": dict(sorted(Counter(t.fault.kind for t in trials).items())),
        "fault_not_applied": dict(
            sorted(Counter(t.fault.kind for t in trials if any("not applied" in n for n in t.notes)).items())
        ),
        "final_states": dict(sorted(Counter(s for t in trials for s in t.final_states).items())),
        "trials_with_several_jobs": sum(1 for t in trials if t.jobs > 1),
        "trials_resumed": sum(1 for t in trials if t.resumes),
        "resumes": sum(len(t.resumes) for t in trials),
        "resumes_losing_nothing": sum(1 for t in trials for _, lost in t.resumes if lost == 0),
        "steps_lost": sum(lost for t in trials for _, lost in t.resumes),
        "violations_per_invariant": {name: per_invariant.get(name, 0) for name in INVARIANTS},
        "violations_total": sum(per_invariant.values()),
        "violations": violations,
        "trials_detail": [
            {
                "trial": t.number,
                **asdict(t.fault),
                "prefix": t.prefix,
                "run_id": t.run_id,
                "states": t.final_states,
                "jobs": t.jobs,
                "resumes": t.resumes,
                "notes": t.notes,
            }
            for t in trials
        ],
    }


def _batch_of(number: int, args: argparse.Namespace) -> int:
    return int(args.first + (number - args.first) // args.batch * args.batch)


def _replay(seed: int, first: int, batch: int) -> str:
    return f"make campaign SEED={seed} FIRST={first} TRIALS={batch} BATCH={batch}"


def _print(summary: dict[str, Any]) -> None:
    print(
        f"\nfault campaign: seed {summary['seed']}, {summary['trials']} trials in {summary['wall_seconds']} s "
        f"({summary['restarts']} service restarts)"
    )
    print(f"{'fault':<22}{'trials':>7}{'not applied':>13}")
    for kind, n in summary["per_fault"].items():
        print(f"{kind:<22}{n:>7}{summary['fault_not_applied'].get(kind, 0):>13}")
    print(
        f"final run states: {summary['final_states']}; trials whose run used more than one job: "
        f"{summary['trials_with_several_jobs']}"
    )
    print(
        f"trials whose trainer resumed from a checkpoint: {summary['trials_resumed']} ({summary['resumes']} resumes, "
        f"{summary['resumes_losing_nothing']} losing nothing; {summary['steps_lost']} steps lost in all)"
    )
    print(f"{'invariant':<24}{'violations':>11}")
    for name, n in summary["violations_per_invariant"].items():
        print(f"{name:<24}{n:>11}  {INVARIANTS[name]}")
    for v in summary["violations"]:
        who = f"trial {v['trial']} ({v['fault']})" if "trial" in v else f"trials {v['trials']}"
        print(f"VIOLATION seed {v['seed']} {who}: {v['invariant']}: {v['detail']}\n    replay: {v['replay']}")
