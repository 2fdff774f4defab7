"""Faults on demand: make the emulator misbehave the way Vertex sometimes does.

A fault plan is a JSON or TOML document (every key optional):

    unavailable_calls = 2            # the next 2 RPCs answer UNAVAILABLE (a transient error clients retry)

    [[quota_exhausted]]              # CreateCustomJob answers RESOURCE_EXHAUSTED with Vertex's quota message
    accelerator_type = "NVIDIA_H100_80GB"   # leave out to match any GPU kind ("CPU" matches CPU-only pools)
    region = "us-central1"                  # leave out to match any region

    [[stockout]]                     # the job is accepted, then FAILS with Vertex's stockout message
    accelerator_type = "NVIDIA_L4"
    region = "europe-west4"

    [[unsupported_machine_type]]     # CreateCustomJob answers INVALID_ARGUMENT 'Machine type "m" is not supported.'
    machine_type = "a3-highgpu-8g"
    region = "asia-east1"

    [spot_preemption]                # jobs with scheduling.strategy SPOT lose their replicas after N seconds
    after_seconds = 2.0              # running time before each preemption
    times = 1                        # preemptions per job; past 6 the job FAILS with the stockout message
    grace_seconds = 1.0              # SIGTERM-to-SIGKILL grace, like a spot VM's shutdown notice

    [job_timeout]                    # every job running longer than this ends FAILED as at its scheduling.timeout
    after_seconds = 20.0             # (a plan whose timeout is too short for its run), with Vertex's timeout status

    [[rate_limits]]                  # Vertex's per-minute request quotas, per region and method (none by default)
    method = "CreateCustomJob"       # a JobService or ModelService method: CreateCustomJob, UploadModel, GetModel, ...
    limit = 60                       # calls allowed in any window_seconds (a refused call does not count)
    region = "us-central1"           # leave out for every region (each region still counts on its own)
    window_seconds = 60              # leave out for a minute; tests shorten it

A call over a rate limit answers RESOURCE_EXHAUSTED as Vertex does: "Quota exceeded for quota metric '...' and limit
'... per minute per region' of service 'aiplatform.googleapis.com' ...", with google.rpc.ErrorInfo (reason
RATE_LIMIT_EXCEEDED, metadata quota_metric, quota_limit, quota_limit_value, quota_location) and google.rpc.QuotaFailure
in the status details. GetFaults reports the calls each (method, region) made and had refused, in all and per minute
(the last MINUTES_KEPT minutes by the wall clock, for a load test's calls-per-minute table).

The plan comes from the --faults file (read at start and again whenever the file changes) and can be replaced
at any time with the control call (control.py); the last one applied wins.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.vertex_emulator.config import ConfigError, read_document
from schemas.vocabulary import MODE_FOR_STRATEGY, ON_DEMAND, ConsumptionMode

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1.types import CustomJobSpec

SPOT_RESTART_LIMIT = 6
CPU = "CPU"
_PLAN_KEYS = (
    "unavailable_calls",
    "quota_exhausted",
    "stockout",
    "unsupported_machine_type",
    "spot_preemption",
    "job_timeout",
    "rate_limits",
)
JOB_SERVICE_METHODS = ("CreateCustomJob", "GetCustomJob", "ListCustomJobs", "CancelCustomJob", "DeleteCustomJob")
MODEL_SERVICE_METHODS = (
    "UploadModel",
    "GetModel",
    "ListModels",
    "ListModelVersions",
    "MergeVersionAliases",
    "UpdateModel",
    "DeleteModelVersion",
    "DeleteModel",
)
RATE_LIMITED_METHODS = JOB_SERVICE_METHODS + MODEL_SERVICE_METHODS
SUBMISSION_METHODS = ("CreateCustomJob", "UploadModel")
"""The calls that start work (a job; UploadModel, which starts a long-running operation): "Job or long-running
operation (LRO) submission requests" on Google's quota page, as Landfall reads it (docs/deploy.md, "Model uploads take
slots too"); the rest are CRUD. Each method is limited on its own here (Google counts a quota's methods together)."""
SERVICE_NAME = "aiplatform.googleapis.com"
MINUTES_KEPT = 180
"""Per-minute call counts kept (the oldest minutes are dropped: a long-lived emulator's counts stay bounded)."""


@dataclass(frozen=True)
class RateQuota:
    """The Vertex AI rate quota a JobService method counts against (Google's quota page names the two: "Job or LRO
    submission requests per minute per region", 60 by default, and "Resource management (CRUD) requests per minute
    per region", 600: https://cloud.google.com/vertex-ai/docs/quotas). The metric ids are the emulator's spelling."""

    metric: str
    metric_title: str
    limit_name: str


SUBMISSION_QUOTA = RateQuota(
    f"{SERVICE_NAME}/job_submission_requests",
    "Job or LRO submission requests",
    "JobSubmissionRequestsPerMinutePerProjectPerRegion",
)
CRUD_QUOTA = RateQuota(
    f"{SERVICE_NAME}/resource_management_requests",
    "Resource management (CRUD) requests",
    "ResourceManagementRequestsPerMinutePerProjectPerRegion",
)


def rate_quota(method: str) -> RateQuota:
    return SUBMISSION_QUOTA if method in SUBMISSION_METHODS else CRUD_QUOTA


@dataclass(frozen=True)
class Match:
    """Which jobs a quota or stockout fault hits: a GPU kind and/or a region (None: any)."""

    accelerator_type: str | None = None
    region: str | None = None

    def hits(self, accelerator_types: frozenset[str], region: str) -> bool:
        if self.region is not None and self.region != region:
            return False
        return self.accelerator_type is None or self.accelerator_type in accelerator_types


@dataclass(frozen=True)
class MachineMatch:
    """A machine type refused in a region (None: every region)."""

    machine_type: str
    region: str | None = None


@dataclass(frozen=True)
class SpotPreemption:
    """Preempt the replicas of SPOT jobs after_seconds of running, `times` times per job."""

    after_seconds: float
    times: int = 1
    grace_seconds: float = 1.0


@dataclass(frozen=True)
class JobTimeout:
    """End every job that has run longer than after_seconds as its scheduling.timeout would."""

    after_seconds: float


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` calls of `method` per region in any window_seconds (region None: every region, each apart)."""

    method: str
    limit: int
    region: str | None = None
    window_seconds: float = 60.0


@dataclass(frozen=True)
class FaultRules:
    """One parsed fault plan."""

    unavailable_calls: int = 0
    quota_exhausted: tuple[Match, ...] = ()
    stockout: tuple[Match, ...] = ()
    unsupported_machine_type: tuple[MachineMatch, ...] = ()
    spot_preemption: SpotPreemption | None = None
    job_timeout: JobTimeout | None = None
    rate_limits: tuple[RateLimit, ...] = ()


def _fields(
    where: str, entry: object, allowed: Mapping[str, type | tuple[type, ...]], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """entry, checked to be an object holding only allowed keys (the required ones among them), each value of its
    key's type: the keyword arguments of the record named by where."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with keys {', '.join(allowed)}; found {entry!r}.")
    unknown = set(entry) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected {', '.join(allowed)}.")
    for key in required:
        if key not in entry:
            raise ConfigError(f"{where}: missing {key}.")
    for key, value in entry.items():
        if not isinstance(value, allowed[key]) or isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected {allowed[key]}, found {value!r}.")
    return entry


def parse_rules(data: Mapping[str, object]) -> FaultRules:
    """Check a fault plan document and turn it into FaultRules; ConfigError names the offending key."""
    unknown = set(data) - set(_PLAN_KEYS)
    if unknown:
        raise ConfigError(f"Unknown fault(s) {', '.join(sorted(unknown))}; expected any of {', '.join(_PLAN_KEYS)}.")
    calls = data.get("unavailable_calls", 0)
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 0:
        raise ConfigError(f"unavailable_calls must be a whole number >= 0, found {calls!r}.")
    match_keys = {"accelerator_type": str, "region": str}

    def matches(key: str) -> tuple[Match, ...]:
        entries = data.get(key, [])
        if not isinstance(entries, list):
            raise ConfigError(f"{key} must be a list of objects, found {entries!r}.")
        return tuple(Match(**_fields(f"{key}[{i}]", e, match_keys)) for i, e in enumerate(entries))

    machines = data.get("unsupported_machine_type", [])
    if not isinstance(machines, list):
        raise ConfigError(f"unsupported_machine_type must be a list of objects, found {machines!r}.")
    spot_entry = data.get("spot_preemption")
    spot = None
    if spot_entry is not None:
        spot = SpotPreemption(
            **_fields(
                "spot_preemption",
                spot_entry,
                {"after_seconds": (int, float), "times": int, "grace_seconds": (int, float)},
                required=("after_seconds",),
            )
        )
        if spot.after_seconds < 0 or spot.times < 0 or spot.grace_seconds < 0:
            raise ConfigError(f"spot_preemption values must not be negative, found {spot}.")
    timeout_entry = data.get("job_timeout")
    job_timeout = None
    if timeout_entry is not None:
        job_timeout = JobTimeout(
            **_fields("job_timeout", timeout_entry, {"after_seconds": (int, float)}, required=("after_seconds",))
        )
        if job_timeout.after_seconds <= 0:
            raise ConfigError(f"job_timeout.after_seconds must be > 0, found {job_timeout.after_seconds}.")
    limits = data.get("rate_limits", [])
    if not isinstance(limits, list):
        raise ConfigError(f"rate_limits must be a list of objects, found {limits!r}.")
    rate_limits = tuple(
        RateLimit(
            **_fields(
                f"rate_limits[{i}]",
                e,
                {"method": str, "limit": int, "region": str, "window_seconds": (int, float)},
                required=("method", "limit"),
            )
        )
        for i, e in enumerate(limits)
    )
    for i, rule in enumerate(rate_limits):
        if rule.method not in RATE_LIMITED_METHODS:
            raise ConfigError(
                f"rate_limits[{i}].method: expected one of {', '.join(RATE_LIMITED_METHODS)}, found {rule.method!r}."
            )
        if rule.limit < 1 or rule.window_seconds <= 0:
            raise ConfigError(f"rate_limits[{i}]: limit must be >= 1 and window_seconds > 0, found {rule}.")
    return FaultRules(
        rate_limits=rate_limits,
        unavailable_calls=calls,
        quota_exhausted=matches("quota_exhausted"),
        stockout=matches("stockout"),
        unsupported_machine_type=tuple(
            MachineMatch(
                **_fields(
                    f"unsupported_machine_type[{i}]",
                    e,
                    {"machine_type": str, "region": str},
                    required=("machine_type",),
                )
            )
            for i, e in enumerate(machines)
        ),
        spot_preemption=spot,
        job_timeout=job_timeout,
    )


class FaultPlan:
    """The live fault plan, shared by the RPC handlers and the job runners (thread-safe)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._mtime: tuple[int, int] | None = None
        self._rules = FaultRules()
        self._unavailable_left = 0
        self._calls: dict[tuple[str, str], deque[float]] = {}
        """(method, region): monotonic times of the calls let through, within the longest window."""
        self.call_counts: Counter[tuple[str, str]] = Counter()
        self.refused_counts: Counter[tuple[str, str]] = Counter()
        self.minute_counts: Counter[tuple[str, str, int, bool]] = Counter()
        """(method, region, minute since the epoch, refused): calls, over the last MINUTES_KEPT minutes."""
        if path is not None:
            self._reload_if_changed()

    def _reload_if_changed(self) -> None:
        if self._path is None:
            return
        try:
            stat = self._path.stat()
            mtime = (stat.st_mtime_ns, stat.st_size)
        except OSError as error:
            if self._mtime is None:
                raise ConfigError(f"Cannot read the fault plan {self._path}: {error.strerror}.") from None
            return
        if mtime == self._mtime:
            return
        first = self._mtime is None
        self._mtime = mtime
        try:
            rules = parse_rules(read_document(self._path))
        except ConfigError as error:
            if first:
                raise
            print(f"vertex emulator: keeping the previous fault plan: {error}", file=sys.stderr, flush=True)
            return
        self._apply(rules)

    def _apply(self, rules: FaultRules) -> None:
        self._rules = rules
        self._unavailable_left = rules.unavailable_calls
        self._calls.clear()  # a new plan's windows and counts start empty
        self.call_counts.clear()
        self.refused_counts.clear()
        self.minute_counts.clear()

    def replace(self, data: Mapping[str, object]) -> FaultRules:
        """Install a new plan (the control call); raises ConfigError and keeps the old plan when it is bad."""
        rules = parse_rules(data)
        with self._lock:
            self._apply(rules)
        return rules

    def current(self) -> FaultRules:
        """The plan in force, after picking up a changed --faults file."""
        with self._lock:
            self._reload_if_changed()
            return self._rules

    def take_unavailable(self) -> bool:
        """True when this RPC must answer UNAVAILABLE (uses up one of the configured calls)."""
        with self._lock:
            self._reload_if_changed()
            if self._unavailable_left > 0:
                self._unavailable_left -= 1
                return True
            return False

    def remaining_unavailable(self) -> int:
        with self._lock:
            return self._unavailable_left

    def take_rate(
        self, method: str, region: str, now: float | None = None, wall: float | None = None
    ) -> RateLimit | None:
        """The rate limit this call passes (it is refused and not counted), else None (the call is counted).
        now: time.monotonic() (the windows); wall: time.time() (the minute it is counted in)."""
        moment = time.monotonic() if now is None else now
        minute = int((time.time() if wall is None else wall) // 60)
        with self._lock:
            self._reload_if_changed()
            key = (method, region)
            rules = [r for r in self._rules.rate_limits if r.method == method and r.region in (None, region)]
            calls = self._calls.setdefault(key, deque())
            longest = max((r.window_seconds for r in rules), default=0.0)
            while calls and calls[0] <= moment - longest:
                calls.popleft()
            for rule in rules:
                if sum(1 for t in calls if t > moment - rule.window_seconds) >= rule.limit:
                    self.refused_counts[key] += 1
                    self._count_minute(method, region, minute, refused=True)
                    return rule
            if rules:
                calls.append(moment)
            self.call_counts[key] += 1
            self._count_minute(method, region, minute, refused=False)
            return None

    def _count_minute(self, method: str, region: str, minute: int, *, refused: bool) -> None:
        """Count one call in its minute (under the lock); a minute's first call drops those past MINUTES_KEPT."""
        key = (method, region, minute, refused)
        if key not in self.minute_counts:
            for old in [k for k in self.minute_counts if k[2] <= minute - MINUTES_KEPT]:
                del self.minute_counts[old]
        self.minute_counts[key] += 1

    def counts(self) -> dict[str, dict[str, int]]:
        """Calls let through and refused for a rate limit, per "method region", since the plan was set."""
        with self._lock:
            keys = sorted(set(self.call_counts) | set(self.refused_counts))
            return {
                f"{method} {region}": {
                    "calls": self.call_counts[(method, region)],
                    "refused": self.refused_counts[(method, region)],
                }
                for method, region in keys
            }

    def per_minute(self) -> dict[str, dict[str, dict[str, int]]]:
        """Calls let through and refused per "method region" and minute: {"CreateCustomJob us-central1": {"<minute
        start, seconds since the epoch>": {"calls": N, "refused": N}}}, minutes in order."""
        with self._lock:
            found: dict[str, dict[str, dict[str, int]]] = {}
            for (method, region, minute, refused), n in sorted(self.minute_counts.items()):
                cell = found.setdefault(f"{method} {region}", {}).setdefault(
                    str(minute * 60), {"calls": 0, "refused": 0}
                )
                cell["refused" if refused else "calls"] += n
            return found


# -- what the faults do to a job ------------------------------------------------------------------------


def quota_message(metric: str) -> str:
    """Vertex's RESOURCE_EXHAUSTED message for a quota over its limit."""
    return f"The following quota metrics exceed quota limits: {metric}"


def rate_limit_message(rule: RateLimit, project: str) -> str:
    """Google's RESOURCE_EXHAUSTED message for a rate quota over its limit."""
    quota = rate_quota(rule.method)
    return (
        f"Quota exceeded for quota metric '{quota.metric_title}' and limit '{quota.metric_title} per minute per "
        f"region' of service '{SERVICE_NAME}' for consumer 'projects/{project}'."
    )


def stockout_message(region: str) -> str:
    """Vertex's message for a job that could not get machines (also used for spot preemptions past the limit)."""
    return f"Resources are insufficient in region: {region}. Try a different region or use a different accelerator."


def unsupported_message(machine_type: str) -> str:
    """Vertex's INVALID_ARGUMENT message for a machine type a region does not offer."""
    return f'Machine type "{machine_type}" is not supported.'


def job_accelerators(job_spec: CustomJobSpec) -> frozenset[str]:
    """GPU kinds the job's used pools ask for; "CPU" stands for a pool without accelerators."""
    kinds = set()
    for spec in job_spec.worker_pool_specs:
        if spec.machine_spec.machine_type:
            accelerator = spec.machine_spec.accelerator_type
            kinds.add(accelerator.name if accelerator else CPU)
    return frozenset(kinds)


def mode_of(job_spec: CustomJobSpec) -> ConsumptionMode:
    """The consumption mode a job's scheduling strategy stands for (STRATEGY_UNSPECIFIED: STANDARD, on demand)."""
    name = job_spec.scheduling.strategy.name
    return MODE_FOR_STRATEGY.get(name, ON_DEMAND)


def is_preemptible(job_spec: CustomJobSpec) -> bool:
    """Jobs whose mode draws on preemptible quota (SPOT and FLEX_START)."""
    return mode_of(job_spec).preemptible_quota


def create_refusal(rules: FaultRules, job_spec: CustomJobSpec, region: str) -> tuple[str, str] | None:
    """("INVALID_ARGUMENT" | "RESOURCE_EXHAUSTED", message) when a fault makes CreateCustomJob refuse the job."""
    from deploy.vertex_emulator.catalog import load_catalog

    for refused in rules.unsupported_machine_type:
        if refused.region in (None, region):
            for spec in job_spec.worker_pool_specs:
                if spec.machine_spec.machine_type == refused.machine_type:
                    return "INVALID_ARGUMENT", unsupported_message(refused.machine_type)
    kinds = job_accelerators(job_spec)
    for rule in rules.quota_exhausted:
        if rule.hits(kinds, region):
            gpus = sorted(kinds - {CPU})
            hit = rule.accelerator_type or (gpus[0] if gpus else CPU)
            metric = load_catalog().quota_metric("" if hit == CPU else hit, preemptible=is_preemptible(job_spec))
            return "RESOURCE_EXHAUSTED", quota_message(metric)
    return None


def stockout_hit(rules: FaultRules, job_spec: CustomJobSpec, region: str) -> bool:
    """True when a stockout fault matches the job: it will FAIL instead of running."""
    kinds = job_accelerators(job_spec)
    return any(rule.hits(kinds, region) for rule in rules.stockout)
