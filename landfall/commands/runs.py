"""`landfall runs` and `landfall run RUN_ID`: read run records from Firestore."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from landfall.tables import render_table


def runs_collection() -> Any:
    from google.cloud import firestore

    from functions.settings import get_settings

    settings = get_settings()
    return firestore.Client(project=settings.project).collection(settings.runs_collection)


def _gpu(plan: dict[str, Any] | None) -> str:
    if not plan:
        return ""
    if plan.get("accelerator_type"):
        return f"{plan.get('accelerator_count')}x{plan['accelerator_type']}"
    return "cpu"


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
    rows = [[d["run_id"], d["state"], d.get("created_at", ""), (d.get("request") or {}).get("dataset", {}).get("uri")
             if isinstance((d.get("request") or {}).get("dataset"), dict) else "",
             (d.get("plan") or {}).get("machine_type", ""), _gpu(d.get("plan")),
             _fmt((d.get("metrics") or {}).get("final", {}).get("accuracy"))] for d in docs]
    print(render_table(["RUN", "STATE", "CREATED", "DATASET", "MACHINE", "GPU", "ACCURACY"], rows) if rows
          else "no runs yet")
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def describe(doc: dict[str, Any]) -> str:
    """A run record as a person reads it: state, dataset, plan, Vertex job, times, metrics, error."""
    request = doc.get("request") or {}
    plan = doc.get("plan") or {}
    vertex = doc.get("vertex") or {}
    timings = doc.get("timings") or {}
    metrics = doc.get("metrics") or {}
    final = metrics.get("final") or {}
    dataset = request.get("dataset") if isinstance(request.get("dataset"), dict) else {}
    lines = [
        f"run       {doc['run_id']}",
        f"state     {doc['state']}",
        f"dataset   {dataset.get('uri', '')} ({dataset.get('object_count', '?')} objects, "
        f"{dataset.get('total_bytes', '?')} bytes)",
        f"task      {request.get('task', '')} / {(request.get('model') or {}).get('preset', '')}",
    ]
    if plan:
        lines.append(f"plan      {plan.get('replica_count', 1)} x {plan.get('machine_type')} ({_gpu(plan)}) in "
                     f"{plan.get('region')}, {plan.get('strategy')}, {'spot' if plan.get('spot') else 'on-demand'}, "
                     f"est. ${_fmt(plan.get('estimated_cost_usd'))}")
    if vertex:
        lines.append(f"job       {vertex.get('job_name')} ({vertex.get('state', '')})")
    for key in ("created_at", "submitted_at", "started_at", "ended_at", "run_seconds"):
        if key in timings:
            lines.append(f"{key:<9} {timings[key]}")
    if final:
        lines.append(f"metrics   loss {_fmt(final.get('loss'))}, accuracy {_fmt(final.get('accuracy'))}, "
                     f"{_fmt(metrics.get('samples_per_second'))} samples/s, "
                     f"wall {_fmt(metrics.get('wall_time_seconds'))} s")
    cost = doc.get("cost") or {}
    if cost:
        lines.append(f"cost      estimated ${_fmt(cost.get('estimated_usd'))}, actual ${_fmt(cost.get('actual_usd'))}")
    if doc.get("artifacts"):
        lines.append(f"model     {doc['artifacts'].get('model_dir')}")
    if doc.get("error"):
        lines.append(f"error     {doc['error'].get('code')}: {doc['error'].get('message')}")
    lines.append("history   " + " -> ".join(h["state"] for h in doc.get("history", [])))
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    snapshot = runs_collection().document(args.run_id).get()
    if not snapshot.exists:
        print(f"landfall run: no run {args.run_id!r}; `landfall runs` lists them", file=sys.stderr)
        return 1
    doc = snapshot.to_dict()
    print(json.dumps(doc, indent=2, default=str) if args.json else describe(doc))
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
