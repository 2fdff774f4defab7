"""Plan: the hardware, parallelism and cost the planner chose for a run, with every alternative it weighed.

Stored on the run record (Firestore `runs/{run_id}.plan`) as `to_dict()`: plain JSON types only. CPU-only plans
have `accelerator_type: null` and `accelerator_count: 0` (the Vertex MachineSpec then leaves accelerator_type
unset, i.e. ACCELERATOR_TYPE_UNSPECIFIED); plans without a Reduction Server have `reduction_server_replicas: 0`
and `reduction_server_machine_type: null`. Memory figures are bytes per GPU (per machine on CPU-only plans);
`gpu_memory_bytes` is the capacity they are checked against (GB = 1e9 bytes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.vertex_jobs import DISK_TYPES
from schemas.vocabulary import (
    CONSUMPTION_MODE,
    CONSUMPTION_MODES,
    FLEX_START,
    ON_DEMAND,
    PRECISIONS,
    RESERVATION,
    SPOT,
    STRATEGIES,
    ConsumptionMode,
)

SCHEMA_VERSION = 1
_RESERVATION_NAME = re.compile(r"^projects/[^/]+/zones/[a-z0-9-]+/reservations/[^/]+$")


@dataclass(frozen=True)
class PlanMemory:
    model_states_bytes: int
    """Parameters, gradients and optimizer states held by one GPU under the plan's strategy."""
    activations_bytes: int
    overhead_bytes: int
    """CUDA context, FSDP gather buffers and the safety margin."""
    total_bytes: int
    gpu_memory_bytes: int
    """Capacity of one GPU (of the machine on CPU-only plans)."""
    usable_bytes: int = 0
    """What the plan may fill: the capacity less the safety margin kept free; 0 in plans recorded before the margin
    was kept (read it as gpu_memory_bytes)."""


@dataclass(frozen=True)
class PlanAlternative:
    """Another candidate the planner considered, and why it lost."""

    rank: int
    """1 = the chosen plan's runner-up; feasible candidates come first, then the nearest misses."""
    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    replica_count: int
    strategy: str
    precision: str
    region: str | None
    """None when no allowed region offers the machine."""
    spot: bool
    reduction_server_replicas: int
    estimated_hours: float | None
    estimated_cost_usd: float | None
    memory_total_bytes: int
    feasible: bool
    reason: str
    p90_hours: float | None = None
    """Its p90 duration (functions/planning/bands.py); None where it has no estimate, or in plans recorded before."""
    samples_per_second_per_gpu: float | None = None
    """Samples each GPU trains per second at its step time; None on a CPU-only machine, or in plans recorded before."""
    mfu: float | None = None
    """The MFU its estimate implies (functions/planning/model_figures.py); None where unknown."""
    figures_from: str = ""
    """Where its step time came from: the team's declaration, a measured run or canary, the model on a GPU kind's
    measured points or a prior, the CPU assumption; "" in plans recorded before."""
    tensor_parallel: int = 1
    """Its layout (Plan.tensor_parallel); written to the dict only when above 1."""
    pipeline_parallel: int = 1
    """Its layout (Plan.pipeline_parallel); written to the dict only when above 1."""

    def to_dict(self) -> dict[str, Any]:
        """Its fields; the time model's figures and a model-parallel layout only when set (a plan recorded before
        them reads back the same)."""
        shown: dict[str, object] = {"p90_hours": None, "samples_per_second_per_gpu": None, "mfu": None}
        shown |= {"figures_from": ""}
        shown |= {"tensor_parallel": 1, "pipeline_parallel": 1}
        return {k: v for k, v in vars(self).items() if k not in shown or v not in (None, "", shown[k])}


@dataclass(frozen=True)
class Plan:
    strategy: str
    """One of vocabulary.STRATEGIES (the trainer's --strategy): under a model-parallel layout, how the data dimension
    holds what tensor_parallel x pipeline_parallel leaves to each GPU."""
    precision: str
    """One of vocabulary.PRECISIONS (the trainer's --precision)."""
    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    """GPUs per machine."""
    replica_count: int
    """Machines (nodes): pool 0 holds one, pool 1 the rest."""
    reduction_server_replicas: int
    reduction_server_machine_type: str | None
    region: str
    mode: str
    """How its machines are bought: one of vocabulary.CONSUMPTION_MODES. Stored as it always was: `spot`,
    `flex_start` and `reservation` (the mode is read back from them), so records keep one form."""
    memory: PlanMemory
    model_parameters: int
    global_batch_size: int
    micro_batch_size: int
    """Samples per process per forward/backward pass: global_batch_size = micro_batch_size x data_parallel x
    gradient_accumulation_steps, exactly."""
    estimated_step_time_seconds: float
    estimated_steps: int
    estimated_hours: float
    """The p50 duration: the model's estimate, start-up included."""
    hourly_cost_usd: float
    """Whole job per hour: machines, accelerators and Reduction Server machines."""
    estimated_cost_usd: float
    """The p50 cost: estimated_hours x hourly_cost_usd."""
    objective: str
    assumptions: tuple[str, ...] = ()
    alternatives: tuple[PlanAlternative, ...] = ()
    alternatives_considered: int = 0
    """Candidates weighed in all (the chosen one included); `alternatives` lists the best-ranked of the rest."""
    prices_estimated: bool = True
    """True when any price behind the cost is an estimate rather than a checked catalog figure."""
    gradient_accumulation_steps: int = 1
    """Micro-batches each process accumulates (without gradient sync) before one optimizer step."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in the backward pass; on only when it is what makes the plan
    fit (see reasons)."""
    max_wait_seconds: int = 0
    """Modes that wait for capacity (Flex-start) only: how long the job may wait for its machines
    (scheduling.max_wait_duration)."""
    timeout_seconds: int = 0
    """scheduling.timeout: the longest the job may run; 0 = Vertex's default (7 days)."""
    boot_disk_type: str = "pd-ssd"
    """DiskSpec.boot_disk_type for the machine family (schemas/data/vertex_jobs.json)."""
    boot_disk_size_gb: int = 100
    reasons: tuple[str, ...] = ()
    """Why the plan is shaped as it is: the batch split, activation checkpointing, scheduling, disks."""
    reservation: str = ""
    """The Compute Engine reservation the job consumes (projects/P/zones/Z/reservations/NAME), through every training
    pool's machineSpec.reservationAffinity; "" = none. Written to the dict only when set."""
    checkpoint_every_steps: int = 0
    """Optimizer steps between checkpoints, from the planned step time and the Spot risk (a team's
    LANDFALL_CHECKPOINT_EVERY_STEPS; the trainer's --checkpoint-every where the plan has no checkpoint_every_seconds);
    0 = not planned (the trainer's default)."""
    checkpoint_every_seconds: int = 0
    """Seconds of training between checkpoints, kept on the wall clock (the trainer's --checkpoint-every-seconds, a
    team's LANDFALL_CHECKPOINT_EVERY_SECONDS): the same interval as checkpoint_every_steps, but not stretched by a
    step time the plan got wrong; 0 in plans recorded before it existed. Written to the dict only when set."""
    p90_hours: float = 0.0
    """The p90 duration: estimated_hours widened by the measured error of the time model behind it
    (functions/planning/bands.py); 0 in plans recorded before estimates were ranges (read it as estimated_hours).
    scheduling.timeout derives from it. Written to the dict only when set."""
    p90_cost_usd: float = 0.0
    """The p90 cost: p90_hours x hourly_cost_usd; 0 in plans recorded before estimates were ranges."""
    band_basis: str = ""
    """Why the p50-p90 band is as wide as it is (the points, prior or measured run it rests on)."""
    samples_per_second_per_gpu: float | None = None
    """Samples each GPU trains per second at the planned step time; None on a CPU-only machine (and in plans recorded
    before it was shown). Written to the dict only when set."""
    mfu: float | None = None
    """The MFU the estimate implies (functions/planning/model_figures.py); None in plans recorded before."""
    figures_from: str = ""
    """Where the step time came from (a prior, measured points, a measured run or canary, the team's declaration)."""
    tensor_parallel: int = 1
    """GPUs of one machine that split each transformer block's heads and MLP columns (the trainer's
    --tensor-parallel, a team's LANDFALL_TENSOR_PARALLEL); 1 = none. Always written beside strategy (1 when unused);
    read as 1 from plans recorded before it."""
    pipeline_parallel: int = 1
    """Pipeline stages the blocks are split into, across machines (the trainer's --pipeline-parallel, a team's
    LANDFALL_PIPELINE_PARALLEL); 1 = none."""
    schema_version: int = SCHEMA_VERSION

    @property
    def layout(self) -> str:
        """The strategy with its model-parallel layout, as texts show it: "ddp", "fsdp, tensor parallel 8 x 4
        pipeline stages"."""
        return layout_text(self.strategy, self.tensor_parallel, self.pipeline_parallel)

    @property
    def data_parallel(self) -> int:
        """Processes on the data dimension: processes / (tensor_parallel x pipeline_parallel)."""
        return max(1, self.processes // (self.tensor_parallel * self.pipeline_parallel))

    @property
    def p50_hours(self) -> float:
        """The median duration: the model's estimate."""
        return self.estimated_hours

    @property
    def p50_cost_usd(self) -> float:
        return self.estimated_cost_usd

    @property
    def p90_hours_or_estimate(self) -> float:
        """The p90 duration; the estimate itself for a plan recorded before estimates were ranges."""
        return self.p90_hours or self.estimated_hours

    @property
    def p90_cost_or_estimate(self) -> float:
        """The p90 cost; the estimate itself for a plan recorded before estimates were ranges."""
        return self.p90_cost_usd or self.estimated_cost_usd

    @property
    def gpu_count(self) -> int:
        return self.accelerator_count * self.replica_count

    @property
    def processes(self) -> int:
        """Training processes: one per GPU, or one per machine without GPUs."""
        return self.gpu_count if self.accelerator_type else self.replica_count

    def __post_init__(self) -> None:
        cut = self.tensor_parallel * self.pipeline_parallel
        if self.tensor_parallel < 1 or self.pipeline_parallel < 1 or self.processes % cut:
            raise SchemaError(
                f"tensor_parallel {self.tensor_parallel} x pipeline_parallel {self.pipeline_parallel} must be >= 1 "
                f"and divide the plan's {self.processes} processes",
                field="plan.tensor_parallel",
            )
        if self.mode not in CONSUMPTION_MODES:
            raise SchemaError(f"expected one of {', '.join(CONSUMPTION_MODES)}, got {self.mode!r}", field="plan.mode")
        if (self.mode == RESERVATION.name) != bool(self.reservation):
            raise SchemaError(
                f"mode {self.mode} with reservation {self.reservation!r}: a plan names its reservation exactly when "
                f"its mode is {RESERVATION.name}",
                field="plan.reservation",
            )

    @property
    def consumption(self) -> ConsumptionMode:
        """The vocabulary's term for `mode`."""
        return CONSUMPTION_MODE[self.mode]

    @property
    def spot(self) -> bool:
        """On Spot machines (for readers written before `mode`)."""
        return self.mode == SPOT.name

    @property
    def flex_start(self) -> bool:
        """Waits for Flex-start capacity (for readers written before `mode`)."""
        return self.mode == FLEX_START.name

    @property
    def scheduling_strategy(self) -> str:
        """Vertex's Scheduling.Strategy name for this plan."""
        return self.consumption.scheduling_strategy

    def to_dict(self) -> dict[str, Any]:
        """JSON- and Firestore-safe: dicts, lists, str, int, float, bool and None only; checkpoint_every_steps and
        the p90 band only when planned (a record written before they existed reads back the same)."""
        return {
            "schema_version": self.schema_version,
            "strategy": self.strategy,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "precision": self.precision,
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "accelerator_count": self.accelerator_count,
            "replica_count": self.replica_count,
            "reduction_server_replicas": self.reduction_server_replicas,
            "reduction_server_machine_type": self.reduction_server_machine_type,
            "region": self.region,
            "spot": self.spot,
            "memory": dict(vars(self.memory)),
            "model_parameters": self.model_parameters,
            "global_batch_size": self.global_batch_size,
            "micro_batch_size": self.micro_batch_size,
            "estimated_step_time_seconds": self.estimated_step_time_seconds,
            "estimated_steps": self.estimated_steps,
            "estimated_hours": self.estimated_hours,
            "hourly_cost_usd": self.hourly_cost_usd,
            "estimated_cost_usd": self.estimated_cost_usd,
            "objective": self.objective,
            "assumptions": list(self.assumptions),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "alternatives_considered": self.alternatives_considered,
            "prices_estimated": self.prices_estimated,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "activation_checkpointing": self.activation_checkpointing,
            "flex_start": self.flex_start,
            "max_wait_seconds": self.max_wait_seconds,
            "timeout_seconds": self.timeout_seconds,
            "boot_disk_type": self.boot_disk_type,
            "boot_disk_size_gb": self.boot_disk_size_gb,
            "reasons": list(self.reasons),
        } | (
            ({"reservation": self.reservation} if self.reservation else {})
            | ({"checkpoint_every_steps": self.checkpoint_every_steps} if self.checkpoint_every_steps else {})
            | ({"checkpoint_every_seconds": self.checkpoint_every_seconds} if self.checkpoint_every_seconds else {})
            | (
                {"p90_hours": self.p90_hours, "p90_cost_usd": self.p90_cost_usd, "band_basis": self.band_basis}
                if self.p90_hours
                else {}
            )
            | (
                {"samples_per_second_per_gpu": self.samples_per_second_per_gpu}
                if self.samples_per_second_per_gpu is not None
                else {}
            )
            | ({"mfu": self.mfu} if self.mfu is not None else {})
            | ({"figures_from": self.figures_from} if self.figures_from else {})
        )

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        return parse_plan(data)


def layout_text(strategy: str, tensor_parallel: int, pipeline_parallel: int) -> str:
    """A strategy and its model-parallel layout in words ("fsdp, tensor parallel 8 x 4 pipeline stages")."""
    parts = [f"tensor parallel {tensor_parallel}"] if tensor_parallel > 1 else []
    parts += [f"{pipeline_parallel} pipeline stages"] if pipeline_parallel > 1 else []
    return f"{strategy}, {' x '.join(parts)}" if parts else strategy


STORED_FIELDS = ({f for f in Plan.__dataclass_fields__} - {"mode"}) | {"spot", "flex_start"}
"""The keys of a stored plan: its fields, with `mode` written as the flags it always was."""


def _optional_string(r: Reader, key: str) -> str | None:
    if r.data.get(key, "") is None:
        return None
    return r.string(key)


def _optional_number(r: Reader, key: str) -> float | None:
    return None if r.data.get(key, 0) is None else r.number(key, minimum=0.0)


def _finite(r: Reader, key: str) -> float:
    value = r.number(key, minimum=0.0)
    if not math.isfinite(value):
        raise SchemaError(f"must be a finite number, got {value}", field=r._name(key))
    return value


def _choice(r: Reader, key: str, choices: tuple[str, ...]) -> str:
    return r.string(key, choices=choices)


def _no_unknown(r: Reader, known: set[str]) -> None:
    for key in r.data:
        if key not in known:
            raise SchemaError(f"unknown field; expected only {', '.join(sorted(known))}", field=r._name(key))


def _alternative(r: Reader) -> PlanAlternative:
    _no_unknown(r, {f for f in PlanAlternative.__dataclass_fields__})
    return PlanAlternative(
        rank=r.integer("rank", minimum=1),
        machine_type=r.string("machine_type"),
        accelerator_type=_optional_string(r, "accelerator_type"),
        accelerator_count=r.integer("accelerator_count", minimum=0),
        replica_count=r.integer("replica_count", minimum=1),
        strategy=_choice(r, "strategy", STRATEGIES),
        precision=_choice(r, "precision", PRECISIONS),
        region=_optional_string(r, "region"),
        spot=r.boolean("spot"),
        reduction_server_replicas=r.integer("reduction_server_replicas", minimum=0),
        estimated_hours=_optional_number(r, "estimated_hours"),
        estimated_cost_usd=_optional_number(r, "estimated_cost_usd"),
        memory_total_bytes=r.integer("memory_total_bytes", minimum=0),
        feasible=r.boolean("feasible"),
        reason=r.string("reason", max_len=4096),
        p90_hours=_optional_number(r, "p90_hours") if "p90_hours" in r.data else None,
        samples_per_second_per_gpu=_optional_number(r, "samples_per_second_per_gpu")
        if "samples_per_second_per_gpu" in r.data
        else None,
        mfu=_optional_number(r, "mfu") if "mfu" in r.data else None,
        figures_from=r.string("figures_from", "", max_len=400),
        tensor_parallel=r.integer("tensor_parallel", 1, minimum=1),
        pipeline_parallel=r.integer("pipeline_parallel", 1, minimum=1),
    )


def _mode(r: Reader) -> str:
    """The consumption mode from the stored flags: `spot`, `flex_start` (absent in old records: false) and
    `reservation` (absent: none); at most one of them set."""
    flags = {
        SPOT.name: r.boolean("spot"),
        FLEX_START.name: r.boolean("flex_start", False),
        RESERVATION.name: bool(r.data.get("reservation")),
    }
    chosen = [mode for mode, on in flags.items() if on]
    if flags[RESERVATION.name] and len(chosen) > 1:
        raise SchemaError(
            "a plan on a reservation is neither Spot nor FLEX_START: drop spot or flex_start", field="plan.reservation"
        )
    if len(chosen) > 1:
        raise SchemaError("a plan is FLEX_START or Spot, not both: set one of them false", field="plan.flex_start")
    return chosen[0] if chosen else ON_DEMAND.name


def parse_plan(data: object) -> Plan:
    """Read a Plan from its dict form; raises SchemaError naming the first bad field."""
    r = Reader(data, "plan")
    version = r.integer("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"version {version} is not supported; this Landfall reads version {SCHEMA_VERSION}",
            field="plan.schema_version",
        )
    _no_unknown(r, STORED_FIELDS)
    m = r.obj("memory")
    _no_unknown(m, {f for f in PlanMemory.__dataclass_fields__})
    required = [k for k in PlanMemory.__dataclass_fields__ if k != "usable_bytes"]
    memory = PlanMemory(
        **{k: m.integer(k, minimum=0) for k in required}, usable_bytes=m.integer("usable_bytes", 0, minimum=0)
    )
    accelerator_type = _optional_string(r, "accelerator_type")
    accelerator_count = r.integer("accelerator_count", minimum=0)
    if (accelerator_type is None) != (accelerator_count == 0):
        raise SchemaError(
            "accelerator_count must be 0 exactly when accelerator_type is null (CPU-only)",
            field="plan.accelerator_count",
        )
    alternatives = r._get("alternatives", [])
    if not isinstance(alternatives, list):
        raise SchemaError("expected a list", field="plan.alternatives")
    assumptions = r.strings("assumptions", ())
    plan = Plan(
        strategy=_choice(r, "strategy", STRATEGIES),
        tensor_parallel=r.integer("tensor_parallel", 1, minimum=1),
        pipeline_parallel=r.integer("pipeline_parallel", 1, minimum=1),
        precision=_choice(r, "precision", PRECISIONS),
        machine_type=r.string("machine_type"),
        accelerator_type=accelerator_type,
        accelerator_count=accelerator_count,
        replica_count=r.integer("replica_count", minimum=1),
        reduction_server_replicas=r.integer("reduction_server_replicas", minimum=0),
        reduction_server_machine_type=_optional_string(r, "reduction_server_machine_type"),
        region=r.string("region"),
        mode=_mode(r),
        memory=memory,
        model_parameters=r.integer("model_parameters", minimum=1),
        global_batch_size=r.integer("global_batch_size", minimum=1),
        micro_batch_size=r.integer("micro_batch_size", minimum=1),
        estimated_step_time_seconds=_finite(r, "estimated_step_time_seconds"),
        estimated_steps=r.integer("estimated_steps", minimum=1),
        estimated_hours=_finite(r, "estimated_hours"),
        hourly_cost_usd=_finite(r, "hourly_cost_usd"),
        estimated_cost_usd=_finite(r, "estimated_cost_usd"),
        objective=r.string("objective", max_len=4096),
        assumptions=assumptions,
        alternatives=tuple(_alternative(Reader(a, f"plan.alternatives[{i}]")) for i, a in enumerate(alternatives)),
        alternatives_considered=r.integer("alternatives_considered", 0, minimum=0),
        prices_estimated=r.boolean("prices_estimated", True),
        gradient_accumulation_steps=r.integer("gradient_accumulation_steps", 1, minimum=1),
        activation_checkpointing=r.boolean("activation_checkpointing", False),
        max_wait_seconds=r.integer("max_wait_seconds", 0, minimum=0),
        timeout_seconds=r.integer("timeout_seconds", 0, minimum=0),
        boot_disk_type=r.string("boot_disk_type", "pd-ssd", choices=DISK_TYPES),
        boot_disk_size_gb=r.integer("boot_disk_size_gb", 100, minimum=10),
        reasons=r.strings("reasons", ()),
        reservation=r.string("reservation", "", max_len=512),
        checkpoint_every_steps=r.integer("checkpoint_every_steps", 0, minimum=0),
        checkpoint_every_seconds=r.integer("checkpoint_every_seconds", 0, minimum=0),
        p90_hours=_finite(r, "p90_hours") if "p90_hours" in r.data else 0.0,
        p90_cost_usd=_finite(r, "p90_cost_usd") if "p90_cost_usd" in r.data else 0.0,
        band_basis=r.string("band_basis", "", max_len=4096),
        samples_per_second_per_gpu=_finite(r, "samples_per_second_per_gpu")
        if "samples_per_second_per_gpu" in r.data
        else None,
        mfu=_finite(r, "mfu") if "mfu" in r.data else None,
        figures_from=r.string("figures_from", "", max_len=400),
    )
    if plan.reservation and not _RESERVATION_NAME.match(plan.reservation):
        raise SchemaError(
            f"expected projects/PROJECT/zones/ZONE/reservations/NAME, got {plan.reservation!r}",
            field="plan.reservation",
        )
    if plan.micro_batch_size * plan.data_parallel * plan.gradient_accumulation_steps != plan.global_batch_size:
        raise SchemaError(
            f"micro_batch_size {plan.micro_batch_size} x {plan.data_parallel} data-parallel processes x "
            f"gradient_accumulation_steps {plan.gradient_accumulation_steps} must equal "
            f"global_batch_size {plan.global_batch_size}",
            field="plan.micro_batch_size",
        )
    if plan.p90_hours and plan.p90_hours < plan.estimated_hours:
        raise SchemaError(
            f"p90_hours {plan.p90_hours} is below the p50 estimated_hours {plan.estimated_hours}: a p90 is at least "
            "the median; write the band's upper end, or 0 for none",
            field="plan.p90_hours",
        )
    if (plan.reduction_server_replicas == 0) != (plan.reduction_server_machine_type is None):
        raise SchemaError(
            "a Reduction Server needs both replicas > 0 and a machine type, or neither",
            field="plan.reduction_server_machine_type",
        )
    return plan


__all__ = ["SCHEMA_VERSION", "Plan", "PlanAlternative", "PlanMemory", "parse_plan"]
