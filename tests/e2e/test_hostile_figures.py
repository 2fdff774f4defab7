"""End to end: a team's container that reports figures no reader takes (tests/e2e/hostile_trainer.py; under
hostile/ a run is planned past the suite's LANDFALL_CANARY_MIN_HOURS and runs a canary first, under hostile-metrics/
the same workload runs without one). A canary reporting 1e9 or Infinity seconds a step, a run reporting Infinity and
NaN figures, a 30-deep metrics.json and a 1.5 MB metrics value, dropped at once: each run ends SUCCEEDED with
warnings and registered, the workload's measurements all in range; then the next run of the same workload is planned
and SUCCEEDS, and the registry reads. Before, the 1e9 canary re-planned its run to infeasible and was measured, so
every later run of the workload was REJECTED; the Infinity canary left its run unreadable; the Infinity figures were
measured, failing every later plan of the workload; the metrics runs stayed RUNNING (their write refused)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from deploy.local import stack
from landfall.synthetic import separable_csv_shards
from schemas.measurement import workload_key
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.training_request import run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e

CASES = {
    "hostile/canary-1e9": "canary metrics.jsonl: step_seconds = 1000000000.0 left out (8 times)",
    "hostile/canary-inf": "canary metrics.jsonl: step_seconds = inf left out (8 times)",
    "hostile-metrics/nonfinite": "metrics.final.step_seconds = inf left out",
    "hostile-metrics/deep": "nested deeper than 10 levels left out",
    "hostile-metrics/huge": "cut to 2,000 characters (first: metrics.final.note, 1,500,000 characters)",
}
"""Each dataset folder (what the container reports there; hostile/ runs a canary first, hostile-metrics/ is the
same workload without one) and a warning its run must carry."""


def _drop(bucket: Any, folder: str) -> str:
    prefix = f"{folder}/"
    (text,) = separable_csv_shards(shards=1, rows_per_shard=20)
    bucket.blob(f"{prefix}part-00000.csv").upload_from_string(text, content_type="text/csv")
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def _registered(local_stack: stack.StackInfo, runs: Any, run_id: str) -> RunRecord:
    """The run once it has ended and, SUCCEEDED, has its model registered; its record read as every reader reads it."""

    def done() -> RunRecord | None:
        snap = runs.document(run_id).get()
        run = parse_run_record(snap.to_dict()) if snap.exists else None
        if run is not None and run.state.terminal and run.state != RunState.SUCCEEDED:
            return run
        return run if run is not None and run.model is not None else None

    try:
        return wait_for(done, 150, f"run {run_id} to end and register its model", step=0.3)
    except AssertionError:
        snap = runs.document(run_id).get()
        logs = local_stack.state_dir / "logs"
        tails = {p.name: p.read_text(errors="replace")[-1200:] for p in sorted(logs.glob("on_job_event*.log"))}
        raise AssertionError(f"run {run_id}: {snap.to_dict() if snap.exists else None}; {tails}") from None


def test_hostile_figures_end_in_warnings_and_the_next_run_of_the_workload_is_planned_and_succeeds(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    from functions.wiring import measurements_store, model_registry

    reconciler_log = local_stack.state_dir / "logs" / "reconcile_runs.log"
    seen = reconciler_log.stat().st_size if reconciler_log.exists() else 0
    dropped = {case: _drop(landing_bucket, case) for case in CASES}
    runs = {case: _registered(local_stack, firestore_runs, run_id) for case, run_id in dropped.items()}
    for case, run in runs.items():
        assert run.state == RunState.SUCCEEDED, (case, run.error, run.warnings)
        assert any(CASES[case] in w for w in run.warnings), (case, run.warnings)
    for case in ("hostile/canary-1e9", "hostile/canary-inf"):  # no step time: the run went on, on its plan
        canary = runs[case].canary
        assert canary is not None and canary.status == "passed" and canary.figures is not None, canary
        assert canary.figures.step_seconds is None and "step time not reported" in canary.verdict
        assert "planned again" not in str(runs[case].plan)

    honest = _registered(local_stack, firestore_runs, _drop(landing_bucket, "hostile/honest-after"))
    assert honest.state == RunState.SUCCEEDED, (honest.error, honest.history)
    assert honest.plan is not None and not any("left out" in w for w in honest.warnings), honest.warnings
    assert honest.plan.estimated_step_time_seconds == pytest.approx(0.25, rel=0.05), honest.plan.assumptions

    measured = measurements_store().for_workload(workload_key(honest.request))
    assert measured, "the workload's runs were measured"
    for m in measured:
        figures = (m.step_seconds, m.peak_memory_gib, m.samples_per_second, m.startup_seconds)
        assert all(math.isfinite(f) for f in figures) and m.step_seconds <= 0.25 * 1.05, m

    registry = model_registry()
    for run in (*runs.values(), honest):
        assert run.model is not None
        version = registry.get(run.model.version_name)
        assert version is not None and version.metadata["run_id"] == run.run_id
    listed = {m.model for m in registry.models()}
    assert {r.model.model for r in (*runs.values(), honest) if r.model} <= listed

    # every reconcile pass since the drops went through the hostile runs and succeeded (none answered 500)
    def passes() -> list[str] | None:
        with reconciler_log.open("rb") as fh:
            fh.seek(seen)
            lines = fh.read().decode(errors="replace").splitlines()
        done = [line for line in lines if "reconcile_runs: " in line and "(message " in line]
        return lines if len(done) >= 2 else None

    lines = wait_for(passes, 30, "two reconcile passes after the hostile runs", step=0.5)
    failed = [line for line in lines if "will be retried" in line or "acknowledged without retry" in line]
    assert not failed, failed
