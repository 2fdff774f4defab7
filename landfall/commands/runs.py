"""`landfall runs` and `landfall run RUN_ID`: read run records from Firestore."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from landfall.tables import render_table
from schemas.errors import SchemaError
from schemas.plan import Plan
from schemas.run_record import RunRecord, parse_run_record


def runs_collection() -> Any:
    from google.cloud import firestore

    from functions.settings import get_settings

    settings = get_settings()
    return firestore.Client(project=settings.project).collection(settings.runs_collection)


def _gpu(plan: Plan | None) -> str:
    if plan is None:
        return ""
    return f"{plan.accelerator_count}x{plan.accelerator_type}" if plan.accelerator_type else "cpu"


def _dataset(run: RunRecord) -> dict[str, Any]:
    """The request's dataset reference (a REJECTED run keeps whatever raw fields could be read)."""
    dataset = run.request.get("dataset")
    return dataset if isinstance(dataset, dict) else {}


def _final(run: RunRecord) -> dict[str, Any]:
    final = (run.metrics or {}).get("final")
    return final if isinstance(final, dict) else {}


def _readable(docs: list[dict[str, Any]]) -> list[RunRecord]:
    runs = []
    for doc in docs:
        try:
            runs.append(parse_run_record(doc))
        except SchemaError as exc:
            print(f"landfall runs: skipping run {doc.get('run_id', '?')!r}, which does not fit the run record "
                  f"schema: {exc} (`landfall runs --json` shows it as stored)", file=sys.stderr)
    return runs


def recent_runs(state: str | None, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` runs (in `state` when given), newest first. A state is filtered by Firestore, which needs
    the composite index (state, created_at desc) of deploy/firestore.indexes.json; the emulator needs none."""
    from google.cloud import firestore
    from google.cloud.firestore_v1.base_query import FieldFilter

    query = runs_collection()
    if state:
        query = query.where(filter=FieldFilter("state", "==", state))
    query = query.order_by("created_at", direction=firestore.Query.DESCENDING).limit(limit)
    return [d.to_dict() for d in query.stream()]


def cmd_runs(args: argparse.Namespace) -> int:
    docs = recent_runs(args.state, args.limit)
    if args.json:
        print(json.dumps(docs, indent=2, default=str))
        return 0
    rows = [[r.run_id, r.state, r.created_at, _dataset(r).get("uri"), r.plan.machine_type if r.plan else "",
             _gpu(r.plan), _fmt(_final(r).get("accuracy"))] for r in _readable(docs)]
    print(render_table(["RUN", "STATE", "CREATED", "DATASET", "MACHINE", "GPU", "ACCURACY"], rows) if rows
          else "no runs yet")
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def describe(run: RunRecord) -> str:
    """A run record as a person reads it: state, dataset, plan, Vertex job, times, metrics, error."""
    request, plan, dataset, final = run.request, run.plan, _dataset(run), _final(run)
    model = request.get("model")
    lines = [
        f"run       {run.run_id}",
        f"state     {run.state}",
        f"dataset   {dataset.get('uri', '')} ({dataset.get('object_count', '?')} objects, "
        f"{dataset.get('total_bytes', '?')} bytes)",
        f"task      {request.get('task', '')} / {model.get('preset', '') if isinstance(model, dict) else ''}",
    ]
    if plan is not None:
        lines.append(f"plan      {plan.replica_count} x {plan.machine_type} ({_gpu(plan)}) in {plan.region}, "
                     f"{plan.strategy}, {'spot' if plan.spot else 'on-demand'}, est. ${_fmt(plan.estimated_cost_usd)}")
    if run.vertex is not None:
        lines.append(f"job       {run.vertex.job_name} ({run.vertex.state})")
    for key, value in run.timings.to_dict().items():
        lines.append(f"{key:<9} {value}")
    if final:
        metrics = run.metrics or {}
        lines.append(f"metrics   loss {_fmt(final.get('loss'))}, accuracy {_fmt(final.get('accuracy'))}, "
                     f"{_fmt(metrics.get('samples_per_second'))} samples/s, "
                     f"wall {_fmt(metrics.get('wall_time_seconds'))} s")
    if run.cost.to_dict():
        lines.append(f"cost      estimated ${_fmt(run.cost.estimated_usd)}, actual ${_fmt(run.cost.actual_usd)}")
    if run.artifacts is not None:
        lines.append(f"model     {run.artifacts.model_dir}")
    if run.error is not None:
        lines.append(f"error     {run.error.code}: {run.error.message}")
    lines.append("history   " + " -> ".join(h.state for h in run.history))
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    snapshot = runs_collection().document(args.run_id).get()
    if not snapshot.exists:
        print(f"landfall run: no run {args.run_id!r}; `landfall runs` lists them", file=sys.stderr)
        return 1
    doc = snapshot.to_dict()
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    try:
        print(describe(parse_run_record(doc)))
    except SchemaError as exc:
        print(f"landfall run: run {args.run_id!r} does not fit the run record schema: {exc}; "
              "`landfall run --json` shows it as stored", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument("--limit", type=int, default=50, help="how many runs to show (default 50)")
    p.add_argument("--state", help="only runs in this state (e.g. FAILED)")
    p.add_argument("--json", action="store_true", help="print the run records as JSON")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("run", help="show one run record: state, plan, Vertex job, times, metrics")
    p.add_argument("run_id", help="the run id (see `landfall runs`)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(func=cmd_run)
