"""The planner's modelling assumptions (data/assumptions.json) as typed, validated records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from functions.planning.errors import CatalogError


@dataclass(frozen=True)
class MemoryAssumptions:
    cuda_context_bytes: int
    cpu_process_bytes: int
    safety_margin_fraction: float
    transformer_activation_bytes_per_token_per_hidden: float
    """Korthikanti's 34 (16-bit activations, no attention-score storage)."""
    mlp_activation_copies: int
    activation_note: str
    checkpoint_kept_bytes_per_token_per_hidden: float = 2.0
    """Bytes per token per hidden unit a checkpointed block keeps (its 16-bit input)."""
    recompute_flops_fraction: float = 1 / 3
    """Extra model FLOPs of recomputing every block's forward in the backward pass."""
    checkpoint_note: str = ""


@dataclass(frozen=True)
class ComputeAssumptions:
    cpu_mfu: float
    gpu_step_overhead_seconds: float
    cpu_step_overhead_seconds: float
    comm_overlap_fraction: float
    comm_note: str
    intra_latency_seconds: float = 2e-5
    """Latency of one collective inside a machine (a tensor-parallel all-reduce of one block's activations), on top
    of its bytes over the bandwidth."""
    network_latency_seconds: float = 5e-5
    """Latency of one point-to-point send between machines (a pipeline stage's activations or their gradients)."""


@dataclass(frozen=True)
class JobAssumptions:
    startup_seconds: float
    max_job_hours: float
    startup_note: str
    spot_note: str
    spot_preemptions_per_node_hour: float = 0.5
    """The prior rate Spot machines are preempted at, per machine-hour of running (functions/planning/risk.py)."""
    spot_prior_node_hours: float = 10.0
    """How many machine-hours of measured running the prior counts as."""
    stockout_prior_tries: float = 4.0
    """Tries without a refusal the refusal share of a shape starts from (nothing tried: no penalty)."""
    stockout_delay_seconds: float = 600.0
    """What one capacity refusal costs in time where none was measured."""
    timeout_margin: float = 1.0
    """scheduling.timeout = (the p90 duration + one start-up) x this (>= 1)."""
    min_timeout_seconds: float = 1800.0
    timeout_note: str = ""


@dataclass(frozen=True)
class HostAssumptions:
    min_vcpus_per_node: int
    min_vcpus_per_gpu: int
    ram_bytes_per_gpu_process: int
    ram_bytes_per_parameter: int
    host_note: str


@dataclass(frozen=True)
class ReductionServerAssumptions:
    machine_type: str
    vcpus: int
    bandwidth_gbps: float
    note: str


@dataclass(frozen=True)
class ObjectiveAssumptions:
    value_of_time_usd_per_hour: float = 50.0
    """The default of constraints.prefer: an hour sooner is worth this many US dollars."""
    note: str = ""


@dataclass(frozen=True)
class CheckpointAssumptions:
    max_lost_minutes: float = 30.0
    """Most minutes of steps a job may lose when it dies without its SIGTERM checkpoint (on demand)."""
    spot_max_lost_minutes: float = 10.0
    """The same on Spot, which Google preempts."""
    bytes_per_parameter: float = 12.0
    """What one checkpoint holds per parameter: fp32 weights and Adam's two moments."""
    write_gbytes_per_second: float = 0.5
    max_write_overhead_fraction: float = 0.05
    """Checkpoints no more often than writing them takes this share of the run."""
    spot_notice_seconds: float = 30.0
    """Seconds a Spot VM gets between its preemption notice (SIGTERM) and its stop: a checkpoint that takes longer to
    write cannot be saved on the notice."""
    note: str = ""


@dataclass(frozen=True)
class TabularAssumptions:
    bytes_per_value: int
    default_features: int
    default_outputs: int


@dataclass(frozen=True)
class BandAssumptions:
    """How wide an estimate's p50-p90 band is (functions/planning/bands.py)."""

    floor: float = 0.10
    """The least p90 / p50 - 1: even a workload measured on the very machine varies run to run (data, stragglers)."""
    prior: float = 1.0
    """p90 / p50 - 1 where the time rests on no measurement of the GPU kind, or on FLOPs nobody declared (x2)."""
    note: str = ""


@dataclass(frozen=True)
class Assumptions:
    memory: MemoryAssumptions
    compute: ComputeAssumptions
    job: JobAssumptions
    host: HostAssumptions
    reduction_server: ReductionServerAssumptions
    tabular: TabularAssumptions
    tokens_per_byte: float
    scale_out_nodes: tuple[int, ...]
    objective: ObjectiveAssumptions = ObjectiveAssumptions()
    checkpoints: CheckpointAssumptions = CheckpointAssumptions()
    band: BandAssumptions = BandAssumptions()


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise CatalogError(f"assumptions.json: missing section {name!r}")
    return value


def _num(section: dict[str, Any], key: str, where: str, *, fraction: bool = False) -> float:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (fraction and value > 1):
        expected = "a fraction in [0, 1]" if fraction else "a non-negative number"
        raise CatalogError(f"assumptions.json: {where}.{key}: expected {expected}, got {value!r}")
    return value


def _at_least_one(section: dict[str, Any], key: str) -> float:
    value = _num(section, key, "job")
    if value < 1:
        raise CatalogError(
            f"assumptions.json: job.{key}: expected a number >= 1 (a timeout below the estimate would "
            f"stop the job before it can finish), got {value!r}"
        )
    return value


def _positive(section: dict[str, Any], key: str) -> float:
    value = _num(section, key, "job")
    if value <= 0:
        raise CatalogError(
            f"assumptions.json: job.{key}: expected a number > 0 (a prior counted as nothing would let one "
            f"observation decide), got {value!r}"
        )
    return value


def parse_assumptions(raw: dict[str, Any]) -> Assumptions:
    """Validate assumptions.json; every number is checked for range, every note kept for the Plan's text."""
    mem, comp, job = _section(raw, "memory"), _section(raw, "compute"), _section(raw, "job")
    host, rs, tab = _section(raw, "host"), _section(raw, "reduction_server"), _section(raw, "tabular")
    lm = _section(raw, "language_model")
    goal, ck = _section(raw, "objective"), _section(raw, "checkpoints")
    for key in ("write_gbytes_per_second", "max_write_overhead_fraction"):
        if not _num(ck, key, "checkpoints") > 0:
            raise CatalogError(f"assumptions.json: checkpoints.{key}: expected a number > 0, got {ck[key]!r}")
    nodes = raw.get("scale_out_nodes")
    if not isinstance(nodes, list) or not nodes or any(not isinstance(n, int) or n < 2 for n in nodes):
        raise CatalogError(f"assumptions.json: scale_out_nodes: expected a list of integers >= 2, got {nodes!r}")
    return Assumptions(
        memory=MemoryAssumptions(
            cuda_context_bytes=int(_num(mem, "cuda_context_bytes", "memory")),
            cpu_process_bytes=int(_num(mem, "cpu_process_bytes", "memory")),
            safety_margin_fraction=_num(mem, "safety_margin_fraction", "memory", fraction=True),
            transformer_activation_bytes_per_token_per_hidden=_num(
                mem, "transformer_activation_bytes_per_token_per_hidden", "memory"
            ),
            mlp_activation_copies=int(_num(mem, "mlp_activation_copies", "memory")),
            activation_note=str(mem.get("activation_note", "")),
            checkpoint_kept_bytes_per_token_per_hidden=_num(
                mem, "checkpoint_kept_bytes_per_token_per_hidden", "memory"
            ),
            recompute_flops_fraction=_num(mem, "recompute_flops_fraction", "memory", fraction=True),
            checkpoint_note=str(mem.get("checkpoint_note", "")),
        ),
        compute=ComputeAssumptions(
            cpu_mfu=_num(comp, "cpu_mfu", "compute", fraction=True),
            gpu_step_overhead_seconds=_num(comp, "gpu_step_overhead_seconds", "compute"),
            cpu_step_overhead_seconds=_num(comp, "cpu_step_overhead_seconds", "compute"),
            comm_overlap_fraction=_num(comp, "comm_overlap_fraction", "compute", fraction=True),
            intra_latency_seconds=_num(comp, "intra_latency_seconds", "compute"),
            network_latency_seconds=_num(comp, "network_latency_seconds", "compute"),
            comm_note=str(comp.get("comm_note", "")),
        ),
        job=JobAssumptions(
            startup_seconds=_num(job, "startup_seconds", "job"),
            max_job_hours=_num(job, "max_job_hours", "job"),
            startup_note=str(job.get("startup_note", "")),
            spot_note=str(job.get("spot_note", "")),
            spot_preemptions_per_node_hour=_num(job, "spot_preemptions_per_node_hour", "job"),
            spot_prior_node_hours=_positive(job, "spot_prior_node_hours"),
            stockout_prior_tries=_positive(job, "stockout_prior_tries"),
            stockout_delay_seconds=_num(job, "stockout_delay_seconds", "job"),
            timeout_margin=_at_least_one(job, "timeout_margin"),
            min_timeout_seconds=_num(job, "min_timeout_seconds", "job"),
            timeout_note=str(job.get("timeout_note", "")),
        ),
        host=HostAssumptions(
            min_vcpus_per_node=int(_num(host, "min_vcpus_per_node", "host")),
            min_vcpus_per_gpu=int(_num(host, "min_vcpus_per_gpu", "host")),
            ram_bytes_per_gpu_process=int(_num(host, "ram_bytes_per_gpu_process", "host")),
            ram_bytes_per_parameter=int(_num(host, "ram_bytes_per_parameter", "host")),
            host_note=str(host.get("host_note", "")),
        ),
        reduction_server=ReductionServerAssumptions(
            machine_type=str(rs.get("machine_type", "")),
            vcpus=int(_num(rs, "vcpus", "reduction_server")),
            bandwidth_gbps=_num(rs, "bandwidth_gbps", "reduction_server"),
            note=str(rs.get("note", "")),
        ),
        tabular=TabularAssumptions(
            bytes_per_value=int(_num(tab, "bytes_per_value", "tabular")),
            default_features=int(_num(tab, "default_features", "tabular")),
            default_outputs=int(_num(tab, "default_outputs", "tabular")),
        ),
        tokens_per_byte=_num(lm, "tokens_per_byte", "language_model"),
        scale_out_nodes=tuple(sorted(set(nodes))),
        objective=ObjectiveAssumptions(
            value_of_time_usd_per_hour=_num(goal, "value_of_time_usd_per_hour", "objective"),
            note=str(goal.get("note", "")),
        ),
        checkpoints=CheckpointAssumptions(
            max_lost_minutes=_num(ck, "max_lost_minutes", "checkpoints"),
            spot_max_lost_minutes=_num(ck, "spot_max_lost_minutes", "checkpoints"),
            bytes_per_parameter=_num(ck, "bytes_per_parameter", "checkpoints"),
            write_gbytes_per_second=_num(ck, "write_gbytes_per_second", "checkpoints"),
            max_write_overhead_fraction=_num(ck, "max_write_overhead_fraction", "checkpoints", fraction=True),
            spot_notice_seconds=_num(ck, "spot_notice_seconds", "checkpoints"),
            note=str(ck.get("note", "")),
        ),
        band=_band(_section(raw, "estimate_band")),
    )


def _band(section: dict[str, Any]) -> BandAssumptions:
    floor, prior = _num(section, "floor", "estimate_band"), _num(section, "prior", "estimate_band")
    if not 0 < floor <= prior:
        raise CatalogError(
            f"assumptions.json: estimate_band: expected 0 < floor <= prior (p90 / p50 - 1 of a measured estimate "
            f"and of a prior), got floor {floor!r} and prior {prior!r}"
        )
    return BandAssumptions(floor=floor, prior=prior, note=str(section.get("note", "")))
