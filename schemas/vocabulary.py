"""Landfall's closed vocabularies: the one place each allowed value is written, with what it means.

Messages (schemas/), the planner (functions/planning/), the trainer's flags (trainer/config.py) and the CLI all take
their tuples from here; index maps and display titles are derived below, never listed again. Order matters where
stated: PRECISIONS is in order of preference for mixed-precision training, and planner arrays index STRATEGIES and
PRECISIONS by position.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType


@dataclass(frozen=True)
class Term:
    """One allowed value of a vocabulary."""

    name: str
    """As written in messages, records and command-line flags."""
    doc: str
    """What the value means, for help texts and readers of the code."""
    title: str = ""
    """As shown to people in tables and explanations; "" = the name."""

    @property
    def label(self) -> str:
        return self.title or self.name


@dataclass(frozen=True)
class Task(Term):
    """A training task; it decides the model family a preset must belong to."""

    model_family: str = ""
    """The family of model presets (schemas/data/model_presets.json) that can learn this task."""
    figures: tuple[tuple[str, str], ...] = ()
    """The task's own figures in metrics.json's `final`, as (key, label): what `landfall runs` shows
    (schemas/run_metrics.py)."""


@dataclass(frozen=True)
class Strategy(Term):
    """A data-parallel strategy (the trainer's --strategy, a Plan's strategy)."""

    uses_fsdp: bool = False
    """True when the trainer wraps the model with FSDP (fully_shard); False: DistributedDataParallel."""


TASK_TERMS: tuple[Task, ...] = (
    Task(
        "tabular-classification",
        "Predict a class id (the label column) from numeric feature columns.",
        model_family="mlp",
        figures=(("accuracy", "accuracy"),),
    ),
    Task(
        "tabular-regression",
        "Predict a number (the label column) from numeric feature columns.",
        model_family="mlp",
        figures=(("r2", "R²"), ("rmse", "RMSE")),
    ),
    Task(
        "causal-lm",
        "Predict the next byte of UTF-8 text (byte-level vocabulary, nothing downloaded).",
        model_family="gpt",
        figures=(("perplexity", "perplexity"),),
    ),
)

STRATEGY_TERMS: tuple[Strategy, ...] = (
    Strategy(
        "ddp",
        "DistributedDataParallel. Every rank holds the whole model and optimizer; gradients are all-reduced.",
        title="DDP",
    ),
    Strategy("zero1", "DDP with ZeroRedundancyOptimizer. Optimizer states are sharded across ranks.", title="ZeRO-1"),
    Strategy(
        "zero2",
        "FSDP SHARD_GRAD_OP (reshard_after_forward=False). Gradients and optimizer states are sharded.",
        title="ZeRO-2 (SHARD_GRAD_OP)",
        uses_fsdp=True,
    ),
    Strategy(
        "fsdp",
        "FSDP FULL_SHARD (reshard_after_forward=True). Parameters, gradients and optimizer states are sharded.",
        title="FSDP (FULL_SHARD)",
        uses_fsdp=True,
    ),
)

PRECISION_TERMS: tuple[Term, ...] = (
    Term("bf16", "bfloat16 autocast with fp32 master weights; fp32's range, so no loss scaling (A100, H100, L4 ...)."),
    Term("fp16", "float16 autocast with fp32 master weights and dynamic loss scaling (T4, V100, P100)."),
    Term("fp32", "Everything in float32 (CPUs, GPUs without 16-bit math, or when asked for)."),
)
"""In order of preference: a GPU trains in the first 16-bit format it has, else in fp32."""

AUTO_PRECISION = Term("auto", "The device decides: the first of bf16, fp16 it supports for GPUs, fp32 on CPUs.")

SPOT_TERMS: tuple[Term, ...] = (
    Term("never", "On-demand machines only."),
    Term("allowed", "Spot when cheaper, counting the expected preemption overhead."),
    Term("required", "Spot machines only (the trainer must checkpoint)."),
)

PREFER_TERMS: tuple[Term, ...] = (
    Term("cheapest", "The least cost, whatever the wait (ties: the shorter run)."),
    Term("fastest", "The shortest run, whatever it costs within the budget (ties: the cheaper)."),
)
"""constraints.prefer's named objectives; any other value is a value of time in US dollars per hour ("25")."""


FLEX_START_TERMS: tuple[Term, ...] = (
    Term("never", "Start at once or fail: the job is created with the standard (or Spot) scheduling strategy."),
    Term(
        "allowed",
        "On GPU kinds Vertex offers it for, the job may wait for capacity (FLEX_START, Dynamic Workload "
        "Scheduler) up to a bounded time, within the deadline; it uses preemptible quota.",
    ),
)


@dataclass(frozen=True)
class ConsumptionMode(Term):
    """A way Google sells a job's machines (its sale, or consumption, mode): what the planner prices and plans, the
    CustomJob's scheduling strategy and the Vertex emulator's behaviour all derive from these fields.

    Adding a mode: a term here, its column in functions/planning/data/prices.json (when it has a price of its own)
    and its flag in every rule of functions/planning/data/consumption.json; tests/unit/test_consumption_modes.py
    then names each place that does not handle it yet."""

    scheduling_strategy: str = "STANDARD"
    """Vertex's Scheduling.Strategy (google.cloud.aiplatform.v1 CustomJob job_spec.scheduling.strategy) a job in this
    mode is created with."""
    preemptible: bool = False
    """Google may take the machines back while the job runs: the trainer must checkpoint, and the planner adds the
    expected preemption overhead to the run's time."""
    preemptible_quota: bool = False
    """The job draws on the project's preemptible GPU quota rather than the on-demand one."""
    price: str = "on_demand"
    """The price column its machines are priced from in functions/planning/data/prices.json (`{price}_usd_per_hour`,
    else on demand x `{price}_factor`); "" = no machine cost: the machines are paid for already (Google bills a
    reservation whether or not it is used)."""
    waits: bool = False
    """The job may wait for capacity (scheduling.max_wait_duration) before it starts."""
    reserved: bool = False
    """The job consumes a Compute Engine reservation (every training pool's machineSpec.reservationAffinity)."""
    sold_as: str = ""
    """How a sentence says the shape is sold this way: "not sold {sold_as}"."""
    tag: str = ""
    """One word for tables (`landfall plan`'s PRICING column)."""


CONSUMPTION_MODE_TERMS: tuple[ConsumptionMode, ...] = (
    ConsumptionMode(
        "on_demand",
        "Bought when the job starts, at the on-demand price; never taken back.",
        title="on demand",
        sold_as="on demand",
        tag="on-demand",
    ),
    ConsumptionMode(
        "spot",
        "Spot VMs: the Spot price, but Google may preempt them at any time (the trainer must checkpoint).",
        title="Spot",
        scheduling_strategy="SPOT",
        preemptible=True,
        preemptible_quota=True,
        price="spot",
        sold_as="as Spot",
        tag="spot",
    ),
    ConsumptionMode(
        "flex_start",
        "Flex-start (Dynamic Workload Scheduler): the job waits for capacity up to a bounded time, then runs up to "
        "7 days without preemption; it draws on preemptible quota and is priced here at on-demand rates.",
        title="Flex-start",
        scheduling_strategy="FLEX_START",
        preemptible_quota=True,
        waits=True,
        sold_as="as Flex-start",
        tag="flex-start",
    ),
    ConsumptionMode(
        "reservation",
        "A Compute Engine reservation the job consumes (reservationAffinity SPECIFIC_RESERVATION): its machines are "
        "paid for whether or not they are used, so the plan counts no machine cost.",
        title="a reservation",
        price="",
        reserved=True,
        sold_as="through reservations",
        tag="reserved",
    ),
)
"""In order of the catalog's descriptions ("on demand, Spot, Flex-start or a reservation"); the first is the default
(a plan that names no other mode)."""


LAUNCH_TERMS: tuple[Term, ...] = (
    Term(
        "per-gpu",
        "Landfall starts one process per GPU on each node (one on a CPU machine), with torchrun's variables, so a "
        "script written for torchrun runs unchanged.",
    ),
    Term("per-node", "Landfall starts one process per node; the code starts its own workers."),
)
"""How a team's own trainer (TrainingRequest trainer.launch) is started on each node; the first is the default."""

TRAINER_FORM_TERMS: tuple[Term, ...] = (
    Term("built-in", "Landfall's own trainer (trainer/): no `trainer` object on the request."),
    Term(
        "script",
        "One Python file, or a folder packed as .pyz, from the code bucket (trainer.script), run under Landfall's "
        "trainer image.",
    ),
    Term("package", "Python packages from the code bucket (trainer.package_uris) and the module to run."),
    Term("image", "The team's own container image (trainer.image_uri), from an allowed registry prefix."),
)
"""What runs a request's training: Vertex's script_path, pythonPackageSpec and containerSpec, and Landfall's own."""


@dataclass(frozen=True)
class FailureReason(Term):
    """Why a job ended, as a run's error records it (`error.reason`, schemas/run_record.py)."""

    capacity: bool = False
    """The region had no room, not the run being wrong: the run is resubmitted on its next plan."""


FAILURE_REASON_TERMS: tuple[FailureReason, ...] = (
    FailureReason("user-code", "The training code failed: an error of the trainer's own, or a crash."),
    FailureReason("bad-data", "The dataset breaks its format; the message names the file and line."),
    FailureReason("bad-config", "A flag, hyperparameter or environment variable is missing or malformed."),
    FailureReason("out-of-memory", "The accelerator or host ran out of memory."),
    FailureReason("preempted", "A Spot machine was taken back.", capacity=True),
    FailureReason("stockout", "The region had no machines of the shape.", capacity=True),
    FailureReason("quota", "The project's quota for the shape is exhausted."),
    FailureReason("timeout", "The job ran longer than its scheduling timeout."),
    FailureReason("cancelled", "Someone (or the reconciler) cancelled the job."),
    FailureReason("platform", "Vertex AI failed the job for a reason nothing above names."),
)
"""Classified by functions/records/failure_reasons.py: the trainer's kind first, then Vertex's text and code."""
FAILURE_REASONS: tuple[str, ...] = tuple(t.name for t in FAILURE_REASON_TERMS)
(
    USER_CODE,
    BAD_DATA,
    BAD_CONFIG,
    OUT_OF_MEMORY,
    PREEMPTED,
    STOCKOUT,
    QUOTA,
    TIMEOUT,
    CANCELLED,
    PLATFORM,
) = FAILURE_REASONS
"""Each failure reason by name, for code that sets or tests one (never its string)."""

QUEUE_REASON_TERMS: tuple[Term, ...] = (
    Term(
        "submit-rate",
        "Landfall's own limiter of CreateCustomJob calls per region (LANDFALL_VERTEX_CREATE_PER_MINUTE) has no room "
        "this minute: the run is submitted on the same plan once it has.",
    ),
    Term(
        "vertex-rate-limit",
        "Vertex AI answered RESOURCE_EXHAUSTED for a per-minute request quota (not GPUs): nothing was created, and "
        "the run is submitted again on the same plan, never moved to a fallback for it.",
    ),
)
"""Why a run being submitted is queued (`submission.queued.reason`, schemas/run_record.py): rate limits, which
delay a submission; capacity refusals move it to the next plan instead (FAILURE_REASON_TERMS, Waiting)."""


TIMEOUT_EXTENDED = "timeout-extended"
"""Why an attempt was made (`submission.attempts[].reason`, schemas/run_record.py) when its job goes on from the
run's previous one: that job reached its scheduling timeout while training advanced, so the run continues from its
newest checkpoint with a timeout from what the job measured (functions/records/continuation.py)."""


TEAM_WAIT_TERMS: tuple[Term, ...] = (
    Term(
        "team-cap",
        "The run's team has its GPU cap (in all, or of this GPU kind) in flight: the run waits and is submitted when "
        "the team's runs free GPUs (deploy/teams.toml, docs/teams.md).",
    ),
    Term(
        "team-budget",
        "The run's estimate would take its team past its monthly budget (reserved estimates plus settled costs): "
        "the run waits until runs settle below their estimates, or the month ends.",
    ),
)
"""Why a run WAITS for its team (`submission.waiting.reason`), beside capacity: retried by the reconciler, the
team's priority deciding who gets freed room first."""

TEAM_REFUSAL_TERMS: tuple[Term, ...] = (
    Term(
        "team-limit",
        "The run alone passes its team's hard limit (more GPUs than a cap, or an estimate above max_run_usd or the "
        "monthly budget): it can never run there, so it is REJECTED with what to change.",
    ),
    Term(
        "team-prefix",
        "The request came on a team's own requests topic for data outside the prefixes that team owns: REJECTED.",
    ),
    Term(
        "team-unowned-data",
        'The teams file says unowned = "reject" and no team owns the request\'s data: REJECTED.',
    ),
    Term(
        "budget-exceeded",
        "The run's cost while running (elapsed time x its plan's hourly price) passed its own constraints.budget_usd: "
        "the reconciler cancelled its job (the run ends CANCELLED with this code); also a run whose job ran past its "
        "reservation when its team's month reached the monthly budget.",
    ),
    Term(
        "team-caller",
        "The request came on the shared requests topic for data a team owns: a team's runs come from its own requests "
        "topic (its members publish there) or from ingest (data dropped under its prefixes), so a request from "
        "anyone else is never charged to it: REJECTED, naming the team's topic.",
    ),
)
"""The `error.code` of a run its team's limits or its own budget stopped (docs/teams.md)."""


@dataclass(frozen=True)
class TrainerFailureKind(Term):
    """A `kind` the trainer writes in its failure record (schemas/trainer_failure.py) that names a cause."""

    reason: str = ""
    """The failure reason it means (one of FAILURE_REASONS)."""


TRAINER_FAILURE_KIND_TERMS: tuple[TrainerFailureKind, ...] = (
    TrainerFailureKind("TrainerError", "An error the trainer raised on purpose.", reason=USER_CODE),
    TrainerFailureKind("ConfigError", "A bad flag, hyperparameter or environment variable.", reason=BAD_CONFIG),
    TrainerFailureKind("DataError", "The training data breaks its format.", reason=BAD_DATA),
    TrainerFailureKind("OutOfMemory", "The accelerator or host ran out of memory.", reason=OUT_OF_MEMORY),
    TrainerFailureKind("Preempted", "SIGTERM arrived before a Spot preemption.", reason=PREEMPTED),
)
"""The trainer's error classes (trainer/errors.py) by name, as failure.json writes them; any other kind is a crash of
the user's code. tests/unit/test_failure_vocabulary.py ties these to the trainer's classes."""


def names(terms: tuple[Term, ...]) -> tuple[str, ...]:
    return tuple(term.name for term in terms)


def index(values: tuple[str, ...]) -> Mapping[str, int]:
    """value -> its position (planner arrays store positions)."""
    return MappingProxyType({value: i for i, value in enumerate(values)})


def describe(terms: tuple[Term, ...]) -> str:
    """A help text for a flag that takes one of terms: "name: doc name: doc" (each doc is a sentence)."""
    return " ".join(f"{term.name}: {term.doc}" for term in terms)


TASKS = names(TASK_TERMS)
TASK_MODEL_FAMILY: Mapping[str, str] = MappingProxyType({t.name: t.model_family for t in TASK_TERMS})
TASK_FIGURES: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType({t.name: t.figures for t in TASK_TERMS})

STRATEGIES = names(STRATEGY_TERMS)
STRATEGY_INDEX = index(STRATEGIES)
STRATEGY_TITLES: Mapping[str, str] = MappingProxyType({t.name: t.label for t in STRATEGY_TERMS})
FSDP_STRATEGIES = tuple(t.name for t in STRATEGY_TERMS if t.uses_fsdp)
TENSOR_PARALLELISM = "tensor"
"""workload.parallelism: the trainer splits each block's heads and MLP columns over GPUs of one machine
(LANDFALL_TENSOR_PARALLEL)."""
PIPELINE_PARALLELISM = "pipeline"
"""workload.parallelism: the trainer runs its blocks as pipeline stages across machines (LANDFALL_PIPELINE_PARALLEL)."""
MODEL_PARALLELISM = (TENSOR_PARALLELISM, PIPELINE_PARALLELISM)
"""What workload.parallelism may list: the model-parallel layouts a trainer supports (the built-in one, both)."""

PRECISIONS = names(PRECISION_TERMS)
PRECISION_INDEX = index(PRECISIONS)
FP32 = PRECISIONS[-1]
REQUESTED_PRECISIONS = (AUTO_PRECISION.name, *PRECISIONS)
"""What the trainer's --precision accepts: auto, or one precision by name."""
PRECISION_POLICIES = (AUTO_PRECISION.name, FP32)
"""What a plan may be asked for: auto (the 16-bit format is the GPU's to decide), or fp32 everywhere."""

SPOT_POLICIES = names(SPOT_TERMS)
FLEX_START_POLICIES = names(FLEX_START_TERMS)
PREFER_OBJECTIVES = names(PREFER_TERMS)


@lru_cache(maxsize=256)
def parse_prefer(text: str) -> str | float:
    """constraints.prefer: "" (the default value of time), "cheapest", "fastest", or a value of time in US dollars
    per hour as a decimal string ("25", "12.5"). Raises ValueError saying what was expected."""
    value = text.strip().lower().removeprefix("$").removesuffix("/h")
    if value in ("", *PREFER_OBJECTIVES):
        return value
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise ValueError(
            f"{text!r} is not an objective: write cheapest, fastest, or a value of time in US dollars per hour as "
            'a string (e.g. "25": an hour sooner is worth $25), or leave it out for the default'
        )
    return number


CONSUMPTION_MODES = names(CONSUMPTION_MODE_TERMS)
ON_DEMAND, SPOT, FLEX_START, RESERVATION = CONSUMPTION_MODE_TERMS
CONSUMPTION_MODE: Mapping[str, ConsumptionMode] = MappingProxyType({m.name: m for m in CONSUMPTION_MODE_TERMS})
MODE_FOR_STRATEGY: Mapping[str, ConsumptionMode] = MappingProxyType(
    {m.scheduling_strategy: m for m in CONSUMPTION_MODE_TERMS if not m.reserved}
)
"""Vertex scheduling strategy -> the mode a job created with it runs in (a reservation is STANDARD plus affinity)."""
SCHEDULING_STRATEGIES = tuple(dict.fromkeys(m.scheduling_strategy for m in CONSUMPTION_MODE_TERMS))
"""The Scheduling.Strategy values Landfall creates jobs with."""
PRICE_COLUMNS = tuple(dict.fromkeys(m.price for m in CONSUMPTION_MODE_TERMS if m.price))
"""The price columns of functions/planning/data/prices.json the modes are priced from; the first is on demand."""

LAUNCH_MODES = names(LAUNCH_TERMS)
TRAINER_FORMS = names(TRAINER_FORM_TERMS)

QUEUE_REASONS = names(QUEUE_REASON_TERMS)
SUBMIT_RATE, VERTEX_RATE_LIMIT = QUEUE_REASONS
TEAM_WAIT_REASONS = names(TEAM_WAIT_TERMS)
TEAM_CAP, TEAM_BUDGET = TEAM_WAIT_REASONS
TEAM_REFUSALS = names(TEAM_REFUSAL_TERMS)
TEAM_LIMIT, TEAM_PREFIX, TEAM_UNOWNED, BUDGET_EXCEEDED, TEAM_CALLER = TEAM_REFUSALS
CAPACITY_REASONS = frozenset(t.name for t in FAILURE_REASON_TERMS if t.capacity)
TRAINER_FAILURE_KINDS = names(TRAINER_FAILURE_KIND_TERMS)
REASON_FOR_TRAINER_KIND: Mapping[str, str] = MappingProxyType({k.name: k.reason for k in TRAINER_FAILURE_KIND_TERMS})
