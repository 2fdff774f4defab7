"""`landfall runs` and `landfall run RUN_ID [--metrics]`: read run records (landfall/queries/runs.py) and
print them in landfall/words.py's words."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from landfall.errors import CommandError
from landfall.figures import FIGURES_SHOWN, FIRST_COLUMNS, epoch_figures, figure_value
from landfall.queries.runs import MAX_ID_BYTES, parse_runs, recent_runs, run_document, run_filters
from landfall.tables import render_table
from landfall.words import (
    STATES_TEXT,
    alternative_gpu_label,
    canary_lines,
    code_text,
    cost_text,
    dataset_ref,
    error_where,
    extension_text,
    failure_reason,
    figures_text,
    final_figures_text,
    fmt_value,
    gpu_label,
    reconcile_lines,
    resumed_text,
    sale_text,
    spot_text,
    wait_lines,
)
from schemas.errors import SchemaError
from schemas.measurement import estimate_error_text
from schemas.record_bounds import ALTERNATIVES_KEPT, HISTORY_HEAD
from schemas.run_metrics import installed_packages, run_warnings
from schemas.run_record import RunRecord, RunState, parse_state

TENSORBOARD_HINT = 'TensorBoard event files; README.md "Metrics" says how to open them'


def since_argument(text: str) -> datetime:
    """--since's type: an RFC 3339 time with a zone, compared with the stored created_at timestamps."""
    from schemas.times import parse_timestamp

    try:
        return parse_timestamp(text, field="--since")
    except SchemaError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time with a zone, e.g. 2026-11-22T10:00:00Z"
        ) from exc


def _json_value(value: Any) -> Any:
    """JSON for what Firestore returns beyond JSON types: a timestamp as RFC 3339 text (schemas.times)."""
    from schemas.times import format_timestamp

    return format_timestamp(value) if isinstance(value, datetime) and value.tzinfo else str(value)


def state_argument(text: str) -> RunState:
    """--state's type: a run state in any case, or argparse's error naming the states."""
    try:
        return parse_state(text.upper())
    except SchemaError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a run state; the states are: {STATES_TEXT}") from exc


def run_id_argument(text: str) -> str:
    """RUN_ID's type: a run id is a Firestore document id in the runs collection, so it holds no '/', is not '.' or
    '..' and does not look like __name__ (the documented constraints on document ids); anything else is refused in
    one line here, before a client library raises on the path."""
    if (
        not text
        or "/" in text
        or text in (".", "..")
        or (text.startswith("__") and text.endswith("__"))
        or len(text.encode("utf-8", errors="replace")) > MAX_ID_BYTES
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id: a run id is one name such as run-3f2a9c01d4e5b6a7c8d9, with no '/' "
            "(`landfall runs` lists them)"
        )
    return text


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _readable(docs: list[dict[str, Any]]) -> tuple[RunRecord, ...]:
    read = parse_runs(docs)
    for skipped in read.unreadable:
        print(
            f"landfall runs: skipping run {skipped.key!r}, which does not fit the run record "
            f"schema: {skipped.problem} (`landfall runs --json` shows it as stored)",
            file=sys.stderr,
        )
    return read.runs


def cmd_runs(args: argparse.Namespace) -> int:
    from landfall.access import cli_viewer, visible_docs

    docs = visible_docs(recent_runs(args.state, args.limit, args.dataset, args.since), cli_viewer())
    if args.json:
        print(json.dumps(docs, indent=2, default=_json_value))
        return 0
    rows = [
        [
            r.run_id,
            r.state,
            r.created_at,
            dataset_ref(r).get("uri"),
            r.plan.machine_type if r.plan else "",
            gpu_label(r.plan),
            code_text(r),
            figures_text(r),
            failure_reason(r),
        ]
        for r in _readable(docs)
    ]
    if rows:
        print(render_table(["RUN", "STATE", "CREATED", "DATASET", "MACHINE", "GPU", "CODE", "METRIC", "REASON"], rows))
    else:
        filters = run_filters(args.state, args.dataset, args.since)
        print(
            "no runs match " + ", ".join(f"{n} {op} {_json_value(v)}" for n, op, v in filters)
            if filters
            else "no runs yet"
        )
    return 0


def _dataset_size(run: RunRecord, dataset: dict[str, Any]) -> str:
    """What the run's dataset holds: what its trainer read once it has, else what the request measured; a request
    that measured nothing (`landfall submit` names a folder without listing it) says when it is counted."""
    if run.data_read is not None:
        return f"{run.data_read.object_count} objects, {run.data_read.total_bytes} bytes read"
    count, size = dataset.get("object_count"), dataset.get("total_bytes")
    if not count and not size:
        return "not counted yet: the job lists the folder when it starts"
    return f"{count if count is not None else '?'} objects, {size if size is not None else '?'} bytes"


def _task_text(task: object, model: object) -> str:
    """The task and model preset the request names; a team's code that names neither decides them itself."""
    preset = model.get("preset", "") if isinstance(model, dict) else ""
    if not task and not preset:
        return "the team's code decides (the request names no task or model preset)"
    return f"{task or '(not named)'} / {preset or '(no preset)'}"


def describe(run: RunRecord) -> str:
    """A run record as a person reads it: state, dataset, plan, Vertex job, times, metrics, error."""
    request, plan, dataset = run.request, run.plan, dataset_ref(run)
    model = request.get("model")
    lines = [
        f"run       {run.run_id}",
        f"state     {run.state}",
        f"dataset   {dataset.get('uri', '')} ({_dataset_size(run, dataset)})",
        f"task      {_task_text(request.get('task'), model)}",
        f"code      {code_text(run)}",
    ]
    if run.retry_of:
        lines.append(f"retry of  {run.retry_of} (`landfall run {run.retry_of}`)")
        lineage = run.request.get("checkpoint_lineage")
        lines.append(
            f"resumes   from the newest checkpoint in run {lineage}'s folder (its line's)"
            if isinstance(lineage, str) and lineage
            else "resumes   nothing: it started at step 0 (retried --from-scratch)"
        )
    if run.retried_by:
        lines.append(f"retried   by {run.retried_by} (`landfall run {run.retried_by}`)")
    if plan is not None:
        lines.append(
            f"plan      {plan.replica_count} x {plan.machine_type} ({gpu_label(plan)}) in {plan.region}, "
            f"{plan.layout}, {sale_text(plan)}, est. {cost_text(plan.estimated_cost_usd) or '?'}"
        )
    if run.vertex is not None:
        lines.append(f"job       {run.vertex.job_name} ({run.vertex.state})")
    lines += canary_lines(run)
    lines += extension_lines(run)
    lines += wait_lines(run)
    lines += reconcile_lines(run)
    for key, value in run.timings.to_dict().items():
        lines.append(f"{key:<9} {value}")
    if run.metrics is not None:
        metrics = run.metrics
        pace = [
            text.format(fmt_value(figure))
            for key, text in (("samples_per_second", "{} samples/s"), ("wall_time_seconds", "wall {} s"))
            if (figure := figure_value(metrics.get(key))) is not None
        ]
        shown = [part for part in (final_figures_text(run), ", ".join(pace)) if part]
        lines.append(f"metrics   {', '.join(shown) or 'none reported'}")
        lines += resumed_lines(metrics)
        if packages := installed_packages(metrics):  # the versions a team's requirements ran with
            lines.append("packages  " + ", ".join(f"{name} {version}" for name, version in packages))
        try:
            lines += [f"warning   {w.code}: {w.message}" for w in run_warnings(metrics)]
        except SchemaError as exc:
            lines.append(f"warning   the run's metrics.json warnings do not fit the schema: {exc}")
    lines += [f"warning   {w}" for w in run.warnings]  # what Landfall left out of what the run reported
    if run.cost.to_dict():
        lines.append(
            f"cost      estimated {cost_text(run.cost.estimated_usd) or '?'}, "
            f"actual {cost_text(run.cost.actual_usd) or 'not yet'}"
        )
    if run.timings.estimated_seconds is not None and run.timings.run_seconds:
        error = (run.timings.estimated_seconds - run.timings.run_seconds) / run.timings.run_seconds
        lines.append(
            f"time      estimated {fmt_value(run.timings.estimated_seconds)} s, "
            f"actual {fmt_value(run.timings.run_seconds)} s ({estimate_error_text(error)})"
        )
    if run.artifacts is not None:
        lines.append(f"model     {run.artifacts.model_dir}")
        lines.append(f"tensorboard {run.artifacts.tensorboard_dir} ({TENSORBOARD_HINT})")
    if run.model is not None:
        promotion = run.model.promotion
        lines.append(f"registry  {run.model.version_name} (`landfall model` shows its lineage)")
        if promotion is not None:
            lines.append(f"promotion {promotion.decision}: {promotion.reason}")
    if run.error is not None:
        lines.append(f"error     {run.error.code}: {run.error.message}")
        where = error_where(run)
        if where:
            lines.append(f"          (the trainer's {where})")
        if run.error.job_message:
            lines.append(f"          Vertex: {run.error.job_message}")
        if run.vertex is not None:
            lines.append(f"          replica logs: `landfall logs {run.run_id}`")
    lines.append("history   " + " -> ".join(_states(run)))
    if plan is not None and plan.alternatives:
        listed = (
            f"; the best {len(plan.alternatives)} kept on the run, `landfall plan` lists the planner's full list"
            if len(plan.alternatives) >= ALTERNATIVES_KEPT and plan.alternatives_considered > len(plan.alternatives) + 1
            else ""
        )
        lines += [
            "",
            f"alternatives ({plan.alternatives_considered} considered in all{listed}):",
            render_table(
                ["RANK", "MACHINE", "GPU", "REGION", "SPOT", "EST $", "WHY NOT"],
                [
                    [
                        a.rank,
                        a.machine_type,
                        alternative_gpu_label(a),
                        a.region or "-",
                        spot_text(a.spot),
                        cost_text(a.estimated_cost_usd),
                        a.reason,
                    ]
                    for a in plan.alternatives
                ],
            ),
        ]
    lines += [
        "",
        "timeline:",
        render_table(["STATE", "AT", "DETAIL"], _timeline(run)),
    ]
    curve = loss_curve(run.metrics or {})
    if curve:
        lines += ["", curve]
    return "\n".join(lines)


def extension_lines(run: RunRecord) -> list[str]:
    """The `extended` lines when a job of the run reached its timeout while training advanced, and the run went on
    from its newest checkpoint (landfall/words.py extension_text), with the arithmetic."""
    text = extension_text(run)
    if not text or run.submission.extension is None:
        return []
    return [f"extended  {text}", f"          {run.submission.extension.basis}"]


def resumed_lines(metrics: dict[str, Any]) -> list[str]:
    """The `progress` line when the run's code resumed from a checkpoint (landfall/words.py resumed_text)."""
    text = resumed_text(metrics)
    return [f"progress  {text}"] if text else []


def _omitted_line(run: RunRecord) -> str:
    return f"({run.history_omitted} entries left out: the rounds are counted under `refusals`)"


def _states(run: RunRecord) -> list[str]:
    """The history's states, with how many were left out where they were (schemas/record_bounds.py)."""
    states = [h.state.value for h in run.history]
    if run.history_omitted:
        states.insert(HISTORY_HEAD, f"... {run.history_omitted} more ...")
    return states


def _timeline(run: RunRecord) -> list[list[str]]:
    rows = [[h.state.value, h.at, h.detail] for h in run.history]
    if run.history_omitted:
        rows.insert(HISTORY_HEAD, ["...", "", _omitted_line(run)])
    return rows


def epoch_table(metrics: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """metrics.json's per-epoch figures as (headers, rows): a column per figure any epoch has, in
    landfall/figures.py FIRST_COLUMNS' order then by name (at most FIGURES_SHOWN), a team's code's as the built-in
    trainer's."""
    epochs = epoch_figures(metrics)
    found = {k for e in epochs for k in e}
    keys = ([k for k in FIRST_COLUMNS if k in found] + sorted(found - set(FIRST_COLUMNS)))[:FIGURES_SHOWN]
    return [k.upper().replace("_", " ") for k in keys], [[fmt_value(e.get(k)) for k in keys] for e in epochs]


CURVE_SIZE = (72, 14)
"""Width and height, in terminal cells, of the loss curve `landfall run` draws."""


def loss_curve(metrics: dict[str, Any]) -> str | None:
    """The per-epoch loss drawn with plotext (plain characters, no colour), or None when no epoch has a loss."""
    import plotext

    points = [(e["epoch"], e["loss"]) for e in epoch_figures(metrics) if "loss" in e]
    if not points:
        return None
    figure = plotext.figure.clear()
    figure.plot_size(*CURVE_SIZE)
    figure.draw(figure.signal([p[0] for p in points], [p[1] for p in points], marker="braille"))
    figure.title("loss per epoch")
    figure.label("epoch", axis="x")
    chart: str = plotext.uncolorize(str(figure.build()))  # plotext ships no types
    return chart


NO_EPOCHS = (
    "metrics.json holds no per-epoch figures: the built-in trainer writes one entry per epoch; a team's code gets "
    "one from each metrics line that carries an `epoch` number (docs/trainer-contract.md)"
)


def describe_metrics(run: RunRecord) -> str:
    """The per-epoch table, then the run's throughput and where its TensorBoard files are."""
    metrics = run.metrics or {}
    headers, rows = epoch_table(metrics)
    lines = [render_table(headers, rows)] if rows else [NO_EPOCHS]
    final = final_figures_text(run)
    if final:
        lines.append(f"final: {final}")
    evaluation = metrics.get("evaluation")
    if isinstance(evaluation, dict) and evaluation.get("split"):
        lines.append(
            f"measured on the {evaluation['split']} split: {evaluation.get('samples', '?')} samples "
            f"({evaluation.get('train_samples', '?')} in the training split)"
        )
    figures = [
        f"{label} {fmt_value(figure_value(metrics.get(key)))}"
        for key, label in (
            ("samples_per_second", "samples/s"),
            ("tokens_per_second", "tokens/s"),
            ("mfu", "MFU"),
            ("wall_time_seconds", "wall s"),
        )
        if figure_value(metrics.get(key)) is not None
    ]
    if figures:
        lines.append(", ".join(figures))
    if run.artifacts is not None:
        lines.append(f"tensorboard {run.artifacts.tensorboard_dir} ({TENSORBOARD_HINT})")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    from landfall.access import check_visible_doc, cli_viewer, visible_run

    if args.json and not args.metrics:
        doc = run_document(args.run_id)
        check_visible_doc(args.run_id, doc, cli_viewer())
        print(json.dumps(doc, indent=2, default=_json_value))
        return 0
    run = visible_run(args.run_id, "run")
    if not args.metrics:
        print(describe(run))
        return 0
    if run.metrics is None:
        raise CommandError(
            f"run {run.run_id} has no metrics (it is {run.state}): the trainer's metrics.json is "
            "recorded when the job succeeds; while it trains, TensorBoard shows the figures"
            + (f" ({run.artifacts.tensorboard_dir})" if run.artifacts else "")
        )
    print(json.dumps(run.metrics.get("epochs") or [], indent=2) if args.json else describe_metrics(run))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "runs",
        help="list runs, newest first",
        description="One row per run, newest first: state, dataset, machine, GPUs, final accuracy and, for a "
        "run that ended without succeeding, its reason (user-code, bad-data, stockout, ...: README, run states).",
    )
    p.add_argument("--limit", type=positive, default=50, metavar="N", help="show at most N runs (default 50)")
    p.add_argument("--state", type=state_argument, metavar="STATE", help=f"only runs in this state: {STATES_TEXT}")
    p.add_argument("--dataset", metavar="URI", help="only runs of this dataset (gs://BUCKET/PREFIX/)")
    p.add_argument(
        "--since",
        type=since_argument,
        metavar="RFC3339",
        help="only runs created at or after this time, e.g. 2026-11-22T10:00:00Z",
    )
    p.add_argument("--json", action="store_true", help="print the run records as JSON")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser(
        "run",
        help="show one run record: state, plan, Vertex job, times, metrics",
        description="One run as a person reads it; --metrics shows its per-epoch figures (from the "
        "trainer's metrics.json) and where its TensorBoard files are.",
    )
    p.add_argument("run_id", type=run_id_argument, metavar="RUN_ID", help="the run id (see `landfall runs`)")
    p.add_argument("--metrics", action="store_true", help="print the per-epoch metrics table")
    p.add_argument("--json", action="store_true", help="print the record (with --metrics: the epochs) as JSON")
    p.set_defaults(func=cmd_run)
