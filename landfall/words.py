"""The words the CLI and the dashboard both print: a run record's short labels (GPUs, dataset, figures, failure
reason, sale), the lines of its canary and waits, durations, money, a team's use, a model version's score and the
trainer's progress. Pure functions of the records, used by `landfall runs`, `run`, `watch`, `teams`, `models`,
`datasets` and the dashboard (landfall/ui/views.py), so that both say the same thing the same way; a label one of them
changes is changed here, for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from landfall.figures import final_figures, headline_figures
from landfall.trainer_log import CONTEXT_FIELDS, parse_record, record_time, short_value
from schemas.dataset_record import DatasetRecord, VersionStatus
from schemas.errors import SchemaError
from schemas.money import usd_text
from schemas.plan import Plan, PlanAlternative
from schemas.run_metrics import FIGURES, resumed_from_step, run_warnings, work_lost
from schemas.run_record import ReconcileErrors, RunRecord, RunState, parse_reconcile_errors
from schemas.vocabulary import TASK_FIGURES

if TYPE_CHECKING:
    from schemas.gpus import GpuSpec

RUN_STATES = tuple(state.value for state in RunState)
"""The run states by name, in the lifecycle's order: what `landfall runs --state` and the runs page offer."""
STATES_TEXT = ", ".join(RUN_STATES)
"""The run states as a sentence lists them (`landfall runs --help`, a refused state)."""


def fmt_value(value: Any) -> str:
    """A figure for a table cell: a float to 4 significant digits, None as "", anything else as its text."""
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def duration_text(seconds: float) -> str:
    """A duration to the second: 45s, 3m 05s, 2h 07m (a negative one as 0s)."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else (f"{minutes}m {secs:02d}s" if minutes else f"{secs}s")


def resumed_text(metrics: dict[str, Any] | None) -> str:
    """ "resumed at step N of M; work lost: K steps (about T)" when the run's code resumed from a checkpoint (M: the
    steps its metrics say it reached, left out when they do not say; the work lost where they say it), "" when it
    started fresh or does not say."""
    step = resumed_from_step(metrics)
    if not step or metrics is None:
        return ""
    steps = metrics.get("steps")
    total = f" of {steps}" if steps is not None and FIGURES["steps"].problem("steps", steps) is None else ""
    return f"resumed at step {step}{total}{work_lost_text(work_lost(metrics))}"


def extension_text(run: RunRecord) -> str:
    """What the run's latest timeout extension did (docs/runs.md, "A timeout while training advanced"), "" when a job
    of it never reached its timeout while training advanced."""
    ext = run.submission.extension
    if ext is None:
        return ""
    times = "once" if ext.number == 1 else f"{ext.number} times"
    return (
        f"{times}: job {ext.job_name.rsplit('/', 1)[-1]} reached its timeout at step {ext.from_step} "
        f"({ext.steps_per_second:.3g} steps/s); the next job on {ext.machine_type} goes on from there with a "
        f"{ext.timeout_seconds} s timeout ({usd_text(ext.spent_usd)} spent on timed-out jobs)"
    )


def work_lost_text(lost: tuple[int, float | None] | None) -> str:
    """ "; work lost: N steps (about T)" from what the run's metrics say its stops lost, "" when they do not say."""
    if lost is None:
        return ""
    steps, seconds = lost
    if not steps:
        return "; no work lost (each stop saved a checkpoint)"
    took = f" (about {duration_text(seconds)})" if seconds is not None else ""
    return f"; work lost: {steps} step{'s' if steps != 1 else ''}{took}"


def cost_text(value: float | None) -> str:
    """A run's or a plan's cost in a table (schemas/money.py usd_text: $1,234.50, $0.0512), "" when there is none."""
    return "" if value is None else usd_text(value)


def price_text(value: float | None) -> str:
    """A planned cost or hourly price (`landfall plan`), as usd_text says it, "-" for none."""
    return "-" if value is None else usd_text(value)


def band_text(plan: Plan) -> str:
    """A plan's estimate as the range it is (`landfall plan`): "p50 1.20 h, $40.00; p90 1.38 h, $46.00"; a plan
    recorded before estimates were ranges shows its estimate at both ends."""
    return (
        f"p50 {plan.p50_hours:,.2f} h, {price_text(plan.p50_cost_usd)}; "
        f"p90 {plan.p90_hours_or_estimate:,.2f} h, {price_text(plan.p90_cost_or_estimate)}"
    )


def hours_text(value: float | None) -> str:
    """Planned hours (`landfall plan`): 1,234.50, "-" for none."""
    return "-" if value is None else f"{value:,.2f}"


def spend_text(value: float) -> str:
    """A team's spend or limit, as usd_text says it: $12.30, $0.0031."""
    return usd_text(value)


def seconds_text(value: float | None) -> str:
    """A run's duration (duration_text), "" when there is none."""
    return "" if value is None else duration_text(value)


def gpus_text(accelerator_type: str | None, count: int, nodes: int, gpus: Mapping[str, GpuSpec]) -> str:
    """A candidate's GPUs in all, by the catalog's display name (`landfall plan`): "16x H100 80GB", or "cpu"."""
    if not accelerator_type:
        return "cpu"
    display = gpus[accelerator_type].display if accelerator_type in gpus else accelerator_type
    return f"{count * nodes}x {display}"


def gpu_label(plan: Plan | None) -> str:
    """The plan's accelerators per replica: "2xNVIDIA_L4", "cpu", or "" with no plan."""
    if plan is None:
        return ""
    return f"{plan.accelerator_count}x{plan.accelerator_type}" if plan.accelerator_type else "cpu"


def alternative_gpu_label(alternative: PlanAlternative) -> str:
    """An alternative plan's accelerators per replica, as gpu_label says a plan's."""
    if alternative.accelerator_type:
        return f"{alternative.accelerator_count}x{alternative.accelerator_type}"
    return "cpu"


def spot_text(spot: bool) -> str:
    """The SPOT column of a plan's alternatives: yes or no."""
    return "yes" if spot else "no"


def sale_text(plan: Plan) -> str:
    """How the plan buys its machines, as `landfall run` names it: its sale mode's tag (on-demand, spot, flex-start,
    reserved)."""
    return plan.consumption.tag


def dataset_ref(run: RunRecord) -> dict[str, Any]:
    """The request's dataset reference (a REJECTED run keeps whatever raw fields could be read)."""
    dataset = run.request.get("dataset")
    return dataset if isinstance(dataset, dict) else {}


def failure_reason(run: RunRecord) -> str:
    """Why a run ended without succeeding, in a word of schemas/vocabulary.py FAILURE_REASONS (user-code, stockout,
    ...; its error code where an older run has no reason); "" for a run that has not failed."""
    if run.error is None:
        return ""
    return run.error.reason or run.error.code


def error_where(run: RunRecord) -> str:
    """Where the trainer says the run failed: its exception's kind and step ("OutOfMemoryError, at step 120"), ""
    when it said neither or the run has not failed."""
    error = run.error
    if error is None:
        return ""
    return ", ".join(part for part in (error.kind, None if error.step is None else f"at step {error.step}") if part)


def job_id_of(job_name: str) -> str:
    """A Vertex job's id from its resource name (projects/P/locations/R/customJobs/ID)."""
    return job_name.rsplit("/", 1)[-1]


def figures_text(run: RunRecord) -> str:
    """The run's headline figure (landfall/figures.py states the rule: its promotion metric, its task's figures,
    a preferred name, else its first figure), e.g. "accuracy 0.975" or "R² 0.58, RMSE 53.1"; a '!' when the
    trainer put a warning on the run (`landfall run` says what)."""
    try:
        warned = bool(run_warnings(run.metrics))
    except SchemaError:
        warned = True
    text = ", ".join(f"{label} {fmt_value(value)}" for label, value in headline_figures(run))
    return f"{text} !" if warned and text else text


def final_figures_text(run: RunRecord) -> str:
    """Every final figure the run reports, loss first, its task's under their labels: "loss 0.42, R² 0.58, RMSE
    53.1" or a team's code's "loss 0.31, accuracy 0.9, lr 0.001, test_loss 0.35" ("" with none)."""
    labels = dict(TASK_FIGURES.get(str(run.request.get("task")), ()))
    return ", ".join(f"{labels.get(k, k)} {fmt_value(v)}" for k, v in final_figures(run.metrics).items())


CODE_NAME_LIMIT = 120
"""Characters of a code's name shown (an image reference may be long)."""


def _plain(text: str) -> str:
    """A name from a request as one line of at most CODE_NAME_LIMIT printable characters."""
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= CODE_NAME_LIMIT else shown[: CODE_NAME_LIMIT - 3] + "..."


def code_text(run: RunRecord) -> str:
    """The code the run trains with: "built-in", "script train.py", "package ddp_example.train" (with its
    distribution's file when there is one) or "image NAME:TAG", from the request's `trainer` object."""
    trainer = run.request.get("trainer")
    if not isinstance(trainer, dict):
        return "built-in"
    script, module, image = trainer.get("script"), trainer.get("python_module"), trainer.get("image_uri")
    version = f", generation {run.code[0].generation}" if run.code else ""  # the version the run found
    if isinstance(script, str) and script:
        return f"script {_plain(script.rsplit('/', 1)[-1])}{version}"
    packages = trainer.get("package_uris")
    if isinstance(module, str) and module:
        first = packages[0] if isinstance(packages, list) and packages and isinstance(packages[0], str) else ""
        return f"package {_plain(module)}" + (f" ({_plain(first.rsplit('/', 1)[-1])}{version})" if first else "")
    if isinstance(image, str) and image:
        return f"image {_plain(image.rsplit('/', 1)[-1])}"
    return "built-in"


def canary_lines(run: RunRecord) -> list[str]:
    """The run's canary (docs/canary.md): its job, status and verdict, and what it measured."""
    c = run.canary
    if c is None:
        return []
    lines = [f"canary    {c.status}: job {job_id_of(c.job_name)} on {c.machine_type} in {c.region}"]
    if c.why:
        lines.append(f"          why: {_plain(c.why)}")
    if c.verdict:
        lines.append(f"          {c.verdict}")
    f = c.figures
    if f is not None:
        measured = [f"{f.steps} steps"]
        if f.step_seconds is not None:
            measured.append(f"{f.step_seconds:.4g} s/step (planned {c.planned_step_seconds:.4g})")
        if f.peak_memory_bytes is not None:
            measured.append(f"peak {f.peak_memory_bytes / 1e9:.3g} GB {f.memory_kind or 'memory'}")
        if f.allreduce_gbps is not None:
            measured.append(f"all-reduce {f.allreduce_gbps:.3g} GB/s x {f.processes or 1}")
        if f.checkpoint_ok is not None:
            measured.append(f"checkpoint {'read back' if f.checkpoint_ok else 'read back DIFFERENT'}")
        lines.append(f"          measured: {', '.join(measured)}")
    return lines


def _refusal_lines(run: RunRecord) -> list[str]:
    """A long wait's refusals, counted (submission.refusals), once a round has ended WAITING."""
    counted = run.submission.refusals
    if counted is None:
        return []
    reasons = ", ".join(f"{n} x {reason}" for reason, n in counted.by_reason.items()) or "none"
    left_out = counted.attempts_omitted + counted.jobs_omitted
    kept = f"; the last ones in full, {left_out} older ones counted only" if left_out else ""
    return [
        f"refusals  {counted.refused} in {counted.rounds} round(s): {reasons}{kept}",
        f"          first at {counted.first_at}: {counted.first}",
        f"          last at {counted.last_at}: {counted.last}",
    ]


def wait_lines(run: RunRecord) -> list[str]:
    """Why the run waits: for capacity (WAITING, submission.waiting), for a rate limit on its plan (SUBMITTING,
    submission.queued, kept with when its job was created) and, noted by the reconciler, for its job to start
    (long_wait: open while the job is queued or pending, then kept with when it started)."""
    lines = []
    if run.state == RunState.WAITING and run.submission.waiting is not None:
        wait = run.submission.waiting
        lines.append(f"waiting   {wait.reason}; next try at {wait.retry_at} (try {wait.tries}, since {wait.since})")
    lines += _refusal_lines(run)
    queued = run.submission.queued
    if queued is not None and queued.over_at is None and run.state == RunState.SUBMITTING:
        lines.append(
            f"queued    {queued.reason} in {queued.region}; next try at {queued.retry_at} (try {queued.tries}, "
            f"since {queued.since}): {queued.message}"
        )
    elif queued is not None and queued.over_at is not None:
        lines.append(f"queued    {queued.reason} in {queued.region} from {queued.since} to {queued.over_at}")
    note = run.long_wait
    if note is not None and note.over_at is None:
        lines.append(f"waiting   {note.reason} (job {note.job_state} since {note.since}; noted {note.noted_at})")
    elif note is not None:
        lines.append(f"waited    {note.reason} (job {job_id_of(note.job_name)}: {note.since} to {note.over_at})")
    return lines


def reconcile_lines(run: RunRecord) -> list[str]:
    """Reconcile passes in a row that failed on the run (`reconcile_errors`), with the last error."""
    return [] if run.reconcile_errors is None else [_reconcile_text(run.reconcile_errors)]


def _reconcile_text(e: ReconcileErrors) -> str:
    passes = "1 pass" if e.count == 1 else f"{e.count} passes in a row"
    return f"reconcile failed on {passes} ({e.first_seen} to {e.last_seen}); last: {e.last_error}"


def reconcile_note_of(doc: dict[str, Any]) -> str:
    """The mark of a run document that does not read as a whole (its `reconcile_errors` alone), as a clause; ""
    when it has none that reads."""
    try:
        marked = doc.get("reconcile_errors")
        return "" if marked is None else f" ({_reconcile_text(parse_reconcile_errors(marked))})"
    except SchemaError:
        return ""


def started_run(record: DatasetRecord) -> str:
    """The run the dataset's version started, or "": a version's run_id is only the id its request would give, and
    a run exists only once the request was published (a REFUSED, WAITING or DUPLICATE version published none)."""
    version = record.version
    return version.run_id if version is not None and version.status == VersionStatus.PUBLISHED else ""


def gpus_in_flight(gpus: Mapping[str, int], cap: Mapping[str, int]) -> str:
    """In flight against the caps: "all 6/16, NVIDIA_L4 2/8"; kinds in flight with no cap of their own as "N x KIND"."""
    shown = [f"{kind} {sum(gpus.values()) if kind == 'all' else gpus.get(kind, 0)}/{n}" for kind, n in cap.items()]
    shown += [f"{n} x {kind}" for kind, n in gpus.items() if kind not in cap]
    return ", ".join(shown) or "0"


def decision_text(metadata: Mapping[str, Any], labels: Mapping[str, str], held: str = "") -> str:
    """A model version's promotion decision (first, promoted, kept, manual-promote, ...): `held`, the one its run
    records now (landfall/queries/models.py held_decisions: a promote, a rollback or a rival's promotion since the
    upload), else its metadata's as uploaded, else its label's (a version registered before the metadata held it),
    else ""."""
    if held:
        return held
    promotion = metadata.get("promotion") or {}
    return str(promotion.get("decision", labels.get("landfall-decision", "")))


def score_text(metadata: Mapping[str, Any]) -> str:
    """A model version's score: its promotion metric's final figure, else its first two final figures by name."""
    promotion = metadata.get("promotion") or {}
    metric = promotion.get("metric") or ""
    final = metadata.get("final") or {}
    if metric and final.get(metric) is not None:
        return f"{metric} {float(final[metric]):.4f}"
    return ", ".join(f"{k} {float(v):.4f}" for k, v in sorted(final.items())[:2])


STEP_MESSAGE = "training"
"""The trainer's record of a step (trainer/loop.py): step, total_steps, epoch, the training batch's loss."""
EPOCH_MESSAGE = "epoch finished"
"""Its record of an epoch's evaluation: loss (and accuracy) on `evaluated_on`, the held-out split when there is one."""
START_MESSAGES = frozenset({"training started", "resumed from checkpoint"})
"""Records after which steps are timed afresh (a replica restarted, or resumed from a checkpoint)."""


def _loss(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "?"


def _eta(points: list[tuple[datetime, int]], total: int | None) -> str:
    """The time left at the pace since training (re)started: steps per second between the first and the last
    (time, step) the trainer logged, or "" when it cannot be told yet."""
    if not total or len(points) < 2:
        return ""
    (began, first), (now, last) = points[0], points[-1]
    if last <= first or now <= began:
        return ""
    rate = (last - first) / (now - began).total_seconds()
    return f"ETA {duration_text((total - last) / rate)}"


def _doing(record: dict[str, Any]) -> str:
    """What the trainer says it is doing (a record that is not a step): its message, since when, its fields."""
    fields = "  ".join(
        f"{k}={short_value(v)}" for k, v in record.items() if k not in CONTEXT_FIELDS and not isinstance(v, dict | list)
    )
    since = record_time(record)
    at = f" (since {since.strftime('%H:%M:%S')} UTC)" if since else ""
    return f"trainer: {record['message']}{at}" + (f"  {fields}" if fields else "")


def _step_at(record: dict[str, Any]) -> tuple[datetime, int] | None:
    """(time, step) of a record that says how far training got; a (re)start counts from the step it resumed at."""
    when = record_time(record)
    step = record.get("step")
    if record["message"] == "training started":
        step = record.get("resumed_from") or 0
    return (when, step) if when is not None and isinstance(step, int) else None


def progress_line(lines: Iterable[str]) -> str | None:
    """The trainer's progress from a replica's log lines, or None before it logged anything: e.g.
    `epoch 2  step 30/40 (75%)  train loss 0.41  held-out loss 0.39 (epoch 1)  ETA 12s`, and a second line
    `trainer: MESSAGE (since 12:00:03 UTC)  FIELDS` when its last record is not a step."""
    records = [r for r in map(parse_record, lines) if r is not None]
    if not records:
        return None
    points: list[tuple[datetime, int]] = []
    last_step = last_epoch = latest = None
    total: int | None = None
    for record in records:
        message = record["message"]
        if isinstance(record.get("total_steps"), int):
            total = record["total_steps"]
        if message in START_MESSAGES:
            points = []
        if message in START_MESSAGES or message in (STEP_MESSAGE, EPOCH_MESSAGE):
            point = _step_at(record)
            points += [point] if point else []
        if message == STEP_MESSAGE:
            last_step = latest = record
        elif message == EPOCH_MESSAGE:
            last_epoch = latest = record
    parts: list[str] = []
    if latest is not None:
        if "epoch" in latest:
            parts.append(f"epoch {latest['epoch']}")
        step = latest.get("step")
        if isinstance(step, int):
            share = f" ({100 * step // total}%)" if total else ""
            parts.append(f"step {step}" + (f"/{total}{share}" if total else ""))
    if last_step is not None:
        parts.append(f"train loss {_loss(last_step.get('loss'))}")
    if last_epoch is not None:
        split = last_epoch.get("evaluated_on") or "held-out"
        parts.append(f"{split} loss {_loss(last_epoch.get('loss'))} (epoch {last_epoch.get('epoch', '?')})")
    eta = _eta(points, total)
    if eta and records[-1]["message"] in (STEP_MESSAGE, EPOCH_MESSAGE):
        parts.append(eta)
    lines_out = ["  ".join(parts)] if parts else []
    if records[-1]["message"] not in (STEP_MESSAGE, EPOCH_MESSAGE):
        lines_out.append(_doing(records[-1]))
    return "\n".join(lines_out) or None
