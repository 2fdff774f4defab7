"""What `make load` turns on and checks about Vertex's rate limits and the teams' GPU caps, pure:
the emulator's fault plan and the dispatcher's limiter for --rate-limits/--rate-scale, the calls per minute by method
against the limits, the queueing time, and the checks on the run records and the sampled jobs in flight.

Google's default rate quotas per project, region and minute (https://cloud.google.com/vertex-ai/docs/quotas,
"Rate-based quotas"; docs/deploy.md, "Vertex AI rate limits"): "Job or LRO submission requests" 60 (CreateCustomJob,
and UploadModel as the emulator counts it), "Resource management (CRUD) requests" 600 (the other JobService and
ModelService methods). Google counts every method of a quota together; the emulator limits each method on its own
(deploy/vertex_emulator/faults.py), so the table also adds each quota's methods up and says when the sum passed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.local_stack.harness import seconds
from deploy.teams import ALL_GPUS
from deploy.vertex_emulator.faults import RATE_LIMITED_METHODS, SUBMISSION_METHODS
from schemas.run_record import AttemptKind, RunRecord, RunState, SubmissionAttempt

GOOGLE_PER_MINUTE = {"submission": 60, "crud": 600}
"""Google's default rate quotas per region and minute (the page above), by the quota's short name."""
RATE_MODES = ("real", "off")
TEAM_WAIT_REASONS = ("team-cap", "team-budget")
"""Why a run may wait in the load test (its teams' limits); any other wait there is a fault of the test's subject."""


def quota_of(method: str) -> str:
    return "submission" if method in SUBMISSION_METHODS else "crud"


def limit_of(method: str, scale: float) -> int:
    """A method's per-minute limit in the load test: Google's figure for its quota times scale (at least 1)."""
    return max(1, round(GOOGLE_PER_MINUTE[quota_of(method)] * scale))


def rate_limits(mode: str, scale: float) -> dict[str, int]:
    """method -> its per-minute limit for --rate-limits MODE --rate-scale SCALE (none with off)."""
    if mode not in RATE_MODES:
        raise ValueError(f"--rate-limits: expected one of {', '.join(RATE_MODES)}, found {mode!r}")
    if not scale > 0:
        raise ValueError(f"--rate-scale: expected a number above 0 (1 = Google's figures), found {scale!r}")
    return {} if mode == "off" else {m: limit_of(m, scale) for m in RATE_LIMITED_METHODS}


def rate_limit_plan(limits: Mapping[str, int]) -> dict[str, object]:
    """The Vertex emulator's fault plan (its --faults) enforcing limits (method -> calls per minute, each region)."""
    return {"rate_limits": [{"method": m, "limit": n} for m, n in limits.items()]} if limits else {}


def limiter_per_minute(deployed: int, scale: float) -> int:
    """The dispatcher's CreateCustomJob limiter under the emulator's limit, as a deployment sets it: the topology's
    value (under Google's 60) times scale."""
    return max(1, round(deployed * scale))


# -- calls per minute ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MethodMinutes:
    """One method's calls in one region, per minute of the test (minute 0 = the minute the drops began)."""

    method: str
    region: str
    calls: tuple[int, ...]
    refused: tuple[int, ...]

    @property
    def peak(self) -> int:
        return max(self.calls, default=0)


def calls_per_minute(per_minute: Mapping[str, Mapping[str, Mapping[str, int]]], start: float) -> list[MethodMinutes]:
    """GetFaults' per_minute ({"METHOD REGION": {"<minute start, epoch s>": {"calls", "refused"}}}) as rows over the
    minutes from the one holding start (epoch seconds) to the last counted; earlier minutes (the warm-up) left out."""
    first = int(start // 60) * 60
    last = max((int(m) for cells in per_minute.values() for m in cells), default=first)
    minutes = range(first, last + 1, 60)
    rows = []
    for key, cells in sorted(per_minute.items()):
        method, _, region = key.partition(" ")
        calls = tuple(cells.get(str(m), {}).get("calls", 0) for m in minutes)
        refused = tuple(cells.get(str(m), {}).get("refused", 0) for m in minutes)
        if any(calls) or any(refused):
            rows.append(MethodMinutes(method, region, calls, refused))
    return rows


def quota_peaks(rows: Sequence[MethodMinutes]) -> dict[tuple[str, str], int]:
    """(quota, region) -> the most calls of all its methods together in one minute (as Google counts a quota)."""
    sums: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        total = sums.setdefault((quota_of(row.method), row.region), [0] * len(row.calls))
        for i, n in enumerate(row.calls):
            total[i] += n
    return {key: max(total, default=0) for key, total in sums.items()}


# -- the run records ----------------------------------------------------------------------------------------


def _rate_limited(attempt: SubmissionAttempt) -> bool:
    return attempt.result.kind == AttemptKind.RATE_LIMITED


def fallback_after_rate_limit(run: RunRecord) -> str | None:
    """How the run moved to another plan after a rate limit (an attempt answered rate-limited followed by an attempt
    on another region or machine type), else None."""
    attempts = run.submission.attempts or ()
    for i, limited in enumerate(attempts):
        if not _rate_limited(limited):
            continue
        for later in attempts[i + 1 :]:
            if (later.region, later.machine_type) != (limited.region, limited.machine_type):
                return (
                    f"{run.run_id}: rate-limited on {limited.machine_type} in {limited.region} at {limited.at}, then "
                    f"tried {later.machine_type} in {later.region} ({later.outcome})"
                )
    return None


def parked(run: RunRecord) -> str | None:
    """How the run waited for something other than its team's limits (in the load test nothing else may hold a run
    back: no capacity faults are set, so a wait there is a rate limit read as capacity), else None."""
    waiting = run.submission.waiting
    for change in run.history:
        if change.state != RunState.WAITING:
            continue
        said = f"{change.detail} {waiting.reason if waiting else ''}"
        if not any(reason in said for reason in TEAM_WAIT_REASONS):
            return f"{run.run_id}: WAITING at {change.at}: {change.detail or (waiting.reason if waiting else '?')}"
    return None


def waited_for_team(run: RunRecord) -> bool:
    """Whether the run was ever WAITING for its team's cap or budget."""
    said = [c.detail for c in run.history if c.state == RunState.WAITING]
    waiting = run.submission.waiting
    said.append(waiting.reason if waiting is not None else "")
    return any(reason in text for text in said for reason in TEAM_WAIT_REASONS)


def queued_seconds(run: RunRecord) -> float | None:
    """How long a rate limit held the run's CreateCustomJob back (submission.queued: since -> over_at), None when it
    never was (or is still queued)."""
    queued = run.submission.queued
    if queued is None:
        return None
    return seconds(queued.over_at, queued.since)


# -- GPUs in flight, sampled --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """The Vertex jobs in flight at one moment: (run id, {accelerator type: GPUs}) for each."""

    at: float
    """Seconds since the drops began."""
    jobs: tuple[tuple[str, Mapping[str, int]], ...]


ALL_KINDS = ALL_GPUS
"""A cap over every GPU kind together (a cap key otherwise names one accelerator type), as deploy/teams.toml says."""


@dataclass(frozen=True)
class CapPeak:
    team: str
    kind: str
    cap: int
    peak: int
    """The most GPUs of that kind the team had in flight in any sample."""
    over: tuple[tuple[float, int], ...]
    """(seconds since the drops began, GPUs) of the samples above the cap."""


def gpus_in_flight(sample: Sample, team_of: Mapping[str, str]) -> dict[tuple[str, str], int]:
    """(team, kind) -> GPUs in flight in one sample, ALL_KINDS included; jobs of runs of no team left out."""
    use: dict[tuple[str, str], int] = {}
    for run_id, kinds in sample.jobs:
        team = team_of.get(run_id)
        if team is None:
            continue
        for kind, n in kinds.items():
            for key in ((team, kind), (team, ALL_KINDS)):
                use[key] = use.get(key, 0) + n
    return use


def cap_peaks(
    samples: Iterable[Sample], team_of: Mapping[str, str], caps: Mapping[str, Mapping[str, int]]
) -> list[CapPeak]:
    """Each team's cap per kind (caps: team -> {kind or ALL_KINDS: GPUs}) against the GPUs it had in flight."""
    peaks = {(team, kind): 0 for team, by_kind in caps.items() for kind in by_kind}
    over: dict[tuple[str, str], list[tuple[float, int]]] = {key: [] for key in peaks}
    for sample in samples:
        for key, n in gpus_in_flight(sample, team_of).items():
            if key not in peaks:
                continue
            peaks[key] = max(peaks[key], n)
            if n > caps[key[0]][key[1]]:
                over[key].append((round(sample.at, 1), n))
    return [
        CapPeak(team, kind, caps[team][kind], peaks[(team, kind)], tuple(over[(team, kind)]))
        for team, kind in sorted(peaks)
    ]
