"""Capacity risk: how often a GPU kind's machines are preempted or refused, learned from what Landfall's own jobs
met, and what that costs a plan in time.

Preemption. Spot machines are taken back as a Poisson process of rate r per machine-hour (per GPU kind and
region). A job on N machines is stopped r x N times an hour, and each stop costs L hours: a new job's start-up,
and the steps since the newest checkpoint (half the Spot checkpoint interval on average). The expected wall time T
then solves T = T0 + r N L T, so T = T0 / (1 - r N L): the overhead grows with the machines, and a faster plan on
more Spot machines is no longer charged the same flat share as one machine. The load r N L is held below
MAX_LOAD (a job stopped faster than it recovers would never end: planned at 20 x its time, so it loses).

r is the Gamma-Poisson posterior mean, (r0 x H0 + preemptions) / (H0 + machine-hours run on Spot): the prior r0
(assumptions.json job.spot_preemptions_per_node_hour) counts as H0 machine-hours of running
(job.spot_prior_node_hours), so a few hours of measured running move it a little and a few hundred settle it.

Refusals. A try is a job created, or a CreateCustomJob call refused for capacity. The share of a GPU kind's tries
in a region and sale mode that were refused for capacity (a stockout or a quota, at once or after Vertex accepted
the job) is p = refusals / (tries + n0), with no refusal assumed before any try (job.stockout_prior_tries, n0): a
shape nobody tried is not penalised. Each refusal costs the time it lost: the mean measured one (a queued job's
wait before Vertex gave up) where any was, else job.stockout_delay_seconds (the back-off before a refused shape is
tried again). The expected wait, p / (1 - p) refusals before a try succeeds, is added to the time the objective and
the deadline see; it is not billed (a refused job runs no machine).

Pure: the dispatcher reads what jobs met (functions/gcp/capacity_store.py) and passes it as a CapacityHistory in
PlannerConfig.capacity; without one, every shape is planned on the priors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from functions.planning.assumptions import JobAssumptions
from functions.planning.errors import PlanInputError

MAX_LOAD = 0.95
"""The most r N L is taken at: the overhead r N L / (1 - r N L) is then 19 x the job's time."""

ON_DEMAND_MODE, SPOT_MODE = "on_demand", "spot"
"""The sale modes the search's spot axis stands for (schemas/vocabulary.py ConsumptionMode names); Flex-start and
reservations are counted under their own names and read as on demand's where the search prices them."""


@dataclass(frozen=True)
class CapacityObservation:
    """What one job, or one refused CreateCustomJob call, met: the planner's side of a capacity event."""

    accelerator_type: str
    """"" for a CPU-only machine."""
    region: str
    mode: str
    """The sale mode it ran or was refused in (ConsumptionMode name: on_demand, spot, flex_start, reservation)."""
    nodes: int = 1
    refused: bool = False
    """Refused for capacity (stockout or quota), at the call or after Vertex accepted the job."""
    lost_seconds: float = 0.0
    """For a refusal: the time from the call to the refusal (0 when refused at the call)."""
    running_hours: float = 0.0
    """Wall hours the job's machines ran (from its start to its end): exposure to preemption, per machine."""
    preempted: bool = False
    """The job's machines were preempted (a Spot job that ended for a preemption)."""

    def __post_init__(self) -> None:
        if not self.region or not self.mode:
            raise PlanInputError("a capacity observation names no region or sale mode")
        if self.nodes < 1 or self.lost_seconds < 0 or self.running_hours < 0:
            raise PlanInputError(
                f"a capacity observation in {self.region} has nodes {self.nodes}, lost_seconds {self.lost_seconds}, "
                f"running_hours {self.running_hours}: nodes must be >= 1 and the times >= 0"
            )


@dataclass(frozen=True)
class ShapeHistory:
    """What one GPU kind met in one region and sale mode."""

    tries: int = 0
    refusals: int = 0
    refusal_seconds: float = 0.0
    """Time the refusals lost, summed (over those that lost any)."""
    timed_refusals: int = 0
    """Refusals that lost time (after Vertex accepted the job): refusal_seconds / timed_refusals is the mean."""
    node_hours: float = 0.0
    """Machine-hours run (each job's running time x its machines)."""
    preemptions: int = 0


Key = tuple[str, str, str]
"""(accelerator_type, region, mode)."""


@dataclass(frozen=True)
class CapacityHistory:
    """What Landfall's recent jobs met, per GPU kind, region and sale mode."""

    shapes: Mapping[Key, ShapeHistory] = field(default_factory=lambda: MappingProxyType({}))
    observations: int = 0
    _tables: dict[tuple[tuple[str, ...], tuple[str, ...], JobAssumptions], RiskTables] = field(
        default_factory=dict, compare=False, repr=False
    )
    """risk_tables' answers, per space (its regions and GPU kinds) and assumptions: made once per history."""

    @staticmethod
    def of(observations: Iterable[CapacityObservation]) -> CapacityHistory:
        counts: dict[Key, ShapeHistory] = {}
        n = 0
        for o in observations:
            n += 1
            key = (o.accelerator_type, o.region, o.mode)
            h = counts.get(key, ShapeHistory())
            counts[key] = ShapeHistory(
                tries=h.tries + 1,
                refusals=h.refusals + int(o.refused),
                refusal_seconds=h.refusal_seconds + (o.lost_seconds if o.refused else 0.0),
                timed_refusals=h.timed_refusals + int(o.refused and o.lost_seconds > 0),
                node_hours=h.node_hours + o.running_hours * o.nodes,
                preemptions=h.preemptions + int(o.preempted),
            )
        return CapacityHistory(shapes=MappingProxyType(counts), observations=n)

    @property
    def regions(self) -> frozenset[str]:
        """The regions something was measured in."""
        return frozenset(region for _, region, _ in self.shapes)

    def get(self, accelerator_type: str, region: str, mode: str) -> ShapeHistory | None:
        return self.shapes.get((accelerator_type, region, mode))


NO_HISTORY = CapacityHistory()


def preemption_rate(h: ShapeHistory | None, a: JobAssumptions) -> float:
    """Preemptions per machine-hour of Spot running: the prior, moved by what was measured."""
    events = h.preemptions if h else 0
    hours = h.node_hours if h else 0.0
    prior_hours = a.spot_prior_node_hours
    return (a.spot_preemptions_per_node_hour * prior_hours + events) / (prior_hours + hours)


def refusal_share(h: ShapeHistory | None, a: JobAssumptions) -> float:
    """The expected share of tries refused for capacity (0 with nothing measured)."""
    if h is None or h.refusals == 0:
        return 0.0
    return min(h.refusals / (h.tries + a.stockout_prior_tries), MAX_LOAD)


def refusal_delay_seconds(h: ShapeHistory | None, a: JobAssumptions) -> float:
    """What one refusal costs in time: the mean measured wait before one, else the assumption."""
    if h is not None and h.timed_refusals > 0:
        return h.refusal_seconds / h.timed_refusals
    return a.stockout_delay_seconds


def expected_wait_hours(h: ShapeHistory | None, a: JobAssumptions) -> float:
    """Hours of expected refusals before a try succeeds: p / (1 - p) refusals of their measured cost each."""
    p = refusal_share(h, a)
    return p / (1.0 - p) * refusal_delay_seconds(h, a) / 3600.0 if p > 0 else 0.0


def preemption_overhead(
    rate: np.ndarray | float, nodes: np.ndarray | float, loss_hours: np.ndarray | float
) -> np.ndarray:
    """The expected extra share of a Spot job's time: load / (1 - load), load = rate x nodes x loss (held below
    MAX_LOAD)."""
    load = np.minimum(np.asarray(rate) * np.asarray(nodes) * np.asarray(loss_hours), MAX_LOAD)
    return np.asarray(load / (1.0 - load))


def lost_per_preemption_seconds(startup_seconds: np.ndarray | float, a_spot_max_lost_minutes: float) -> np.ndarray:
    """What one preemption costs: a new job's start-up and, on average, half the Spot checkpoint interval's steps."""
    return np.asarray(startup_seconds) + a_spot_max_lost_minutes * 60.0 / 2.0


@dataclass(frozen=True)
class RiskTables:
    """The history as arrays the search indexes: [region, kind] with the CPU-only machines as the last kind."""

    preemption_rate: np.ndarray
    """[region, kind] Spot preemptions per machine-hour."""
    wait_hours: np.ndarray
    """[spot, region, kind] expected hours of refusals before a try succeeds (spot 0 on demand, 1 Spot)."""


def risk_tables(
    regions: tuple[str, ...], kinds: tuple[str, ...], history: CapacityHistory, a: JobAssumptions
) -> RiskTables:
    """The tables for a space's regions and GPU kinds ("" = CPU-only, the last column)."""
    key = (regions, kinds, a)
    kept = history._tables.get(key)
    if kept is not None:
        return kept
    columns = (*kinds, "")
    rate = np.full((len(regions), len(columns)), preemption_rate(None, a))
    wait = np.zeros((2, len(regions), len(columns)))
    if history.shapes:
        region_at = {r: j for j, r in enumerate(regions)}
        kind_at = {k: i for i, k in enumerate(columns)}
        for (kind, region, mode), h in history.shapes.items():
            j, i = region_at.get(region), kind_at.get(kind)
            if j is None or i is None:
                continue
            if mode == SPOT_MODE:
                rate[j, i] = preemption_rate(h, a)
                wait[1, j, i] = expected_wait_hours(h, a)
            elif mode == ON_DEMAND_MODE:
                wait[0, j, i] = expected_wait_hours(h, a)
    rate.flags.writeable = wait.flags.writeable = False  # shared by every plan made with this history
    made = history._tables[key] = RiskTables(preemption_rate=rate, wait_hours=wait)
    if len(history._tables) > 16:  # a history lives a minute; spaces are few (pinned requests make their own)
        history._tables.clear()
        history._tables[key] = made
    return made


def risk_notes(
    history: CapacityHistory,
    a: JobAssumptions,
    *,
    kind: str,
    region: str,
    spot: bool,
    nodes: int,
    loss_seconds: float,
) -> list[str]:
    """What the plan's time took from the capacity history, for people."""
    label = kind or "CPU-only machines"
    lines: list[str] = []
    mode = SPOT_MODE if spot else ON_DEMAND_MODE
    h = history.get(kind, region, mode)
    if spot:
        rate = preemption_rate(h, a)
        overhead = float(preemption_overhead(rate, nodes, loss_seconds / 3600.0))
        measured = (
            f"{h.preemptions} preemption(s) over {h.node_hours:.3g} machine-hours of {label} Spot in {region}, "
            f"with the prior's {a.spot_preemptions_per_node_hour:g}/h counted as {a.spot_prior_node_hours:g} "
            "machine-hours"
            if h is not None and h.node_hours > 0
            else f"the prior {a.spot_preemptions_per_node_hour:g}/h (nothing measured on {label} Spot in {region})"
        )
        lines.append(
            f"preemption: {rate:.3g} per machine-hour ({measured}) x {nodes} machine(s) x {loss_seconds / 60:.3g} "
            f"min lost each (a new job's start-up, half the checkpoint interval): +{overhead:.1%} time"
        )
    if h is not None and h.refusals > 0:
        wait = expected_wait_hours(h, a)
        lines.append(
            f"refusals: {h.refusals} of {h.tries} tries of {label} {'Spot' if spot else 'on demand'} in {region} were "
            f"refused for capacity (share {refusal_share(h, a):.2g}, counting {a.stockout_prior_tries:g} more tries "
            f"as a prior), {refusal_delay_seconds(h, a):.3g} s lost each: +{wait * 60:.3g} min expected before it "
            "runs (counted against the deadline and the objective, not billed)"
        )
    return lines
