"""Vertex AI JobService adapter: create, read and find CustomJobs; client errors become Landfall's error kinds."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from functions.errors import PermanentError, TransientError, missing_permission
from schemas.canary import CANARY_LABEL, CANARY_LABEL_VALUE
from schemas.job_view import RUN_LABEL, JobView
from schemas.times import format_timestamp


class CapacityError(Exception):
    """The region cannot run this shape now (quota exhausted, shape not offered, stockout): try another plan."""


class RateLimitedError(TransientError):
    """Vertex refused the call for a per-minute request quota (RESOURCE_EXHAUSTED naming a rate quota metric, or
    reason RATE_LIMIT_EXCEEDED): nothing was created, and the same call on the same plan succeeds once the minute's
    quota refills. Never a reason to try another plan: a rate limit read as
    capacity would send the run to a costlier fallback (docs/decisions/rate-limits-are-not-capacity.md)."""

    def __init__(self, message: str, *, region: str = "", quota_metric: str = "") -> None:
        super().__init__(message)
        self.region = region
        self.quota_metric = quota_metric


RATE_LIMIT_REASON = "RATE_LIMIT_EXCEEDED"
"""google.rpc.ErrorInfo.reason of a rate quota over its limit (Google's API error model, AIP-193)."""

CAPACITY_QUOTA_PREFIX = "aiplatform.googleapis.com/custom_model_training_"
"""Quota metrics of resources in use (GPUs, CPUs, disk of training jobs): over them, the region cannot run the shape
now, so another plan may; e.g. aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus."""

_METRIC_IN_TEXT = re.compile(r"aiplatform\.googleapis\.com/[A-Za-z0-9_./-]+")
_QUOTED_METRIC = re.compile(r"[Qq]uota exceeded for quota metric '([^']+)'")


def quota_metric(exc: Exception) -> str:
    """The quota metric a RESOURCE_EXHAUSTED names: ErrorInfo.metadata["quota_metric"], else a QuotaFailure
    violation's quota_metric (or subject), else the metric written in the message ("" when none)."""
    details = list(getattr(exc, "details", None) or ())
    metadata = getattr(exc, "metadata", None) or {}
    if metadata.get("quota_metric"):
        return str(metadata["quota_metric"])
    for detail in details:
        for violation in getattr(detail, "violations", ()):
            metric = getattr(violation, "quota_metric", "") or getattr(violation, "subject", "")
            if metric:
                return str(metric)
    message = str(getattr(exc, "message", "") or exc)
    found = _METRIC_IN_TEXT.search(message) or _QUOTED_METRIC.search(message)
    if found is None:
        return ""
    return found.group(1) if found.re is _QUOTED_METRIC else found.group(0)


def is_rate_limit(exc: Exception) -> bool:
    """Whether a RESOURCE_EXHAUSTED is a per-minute request quota (retry the same call later) rather than a resource
    quota or stockout (capacity: another plan). ErrorInfo's reason decides when present; otherwise the metric: the
    training resource quotas (custom_model_training_*) are capacity, any other metric naming requests, or a message
    of a limit "per minute", is a rate."""
    if getattr(exc, "reason", None) == RATE_LIMIT_REASON:
        return True
    metric = quota_metric(exc)
    if metric.startswith(CAPACITY_QUOTA_PREFIX):
        return False
    message = str(getattr(exc, "message", "") or exc).lower()
    return "request" in metric.lower() or "per minute" in message


def _ts(value: Any) -> str:
    """A proto Timestamp field as RFC 3339 text; "" when unset (the epoch) or unreadable."""
    if value is None:
        return ""
    try:
        return format_timestamp(value) if value.timestamp() > 0 else ""
    except (AttributeError, OSError, ValueError):
        return ""


def view(job: Any) -> JobView:
    name = str(job.name)
    parts = name.split("/")
    return JobView(
        name=name,
        job_id=parts[-1],
        region=parts[3] if len(parts) > 3 else "",
        display_name=str(job.display_name),
        state=job.state.name if hasattr(job.state, "name") else str(job.state),
        error_code=int(job.error.code) if job.error else 0,
        error_message=str(job.error.message) if job.error else "",
        create_time=_ts(job.create_time),
        start_time=_ts(job.start_time),
        end_time=_ts(job.end_time),
        labels=dict(job.labels),
    )


_MACHINE_NOT_OFFERED = re.compile(r'Machine type "[^"]*" is not supported\.?')


def offered_nowhere_here(message: str) -> bool:
    """True when every problem Vertex lists is 'Machine type "m" is not supported.': the region does not offer the
    shape, which another region or plan may. Any other refusal (a boot disk the machine does not take, an
    accelerator it does not carry) is a wrong spec that no fallback fixes, so it is not mistaken for capacity."""
    problems = re.findall(r"Message: (.*?)(?:\t|$)", message) or [message]
    return all(_MACHINE_NOT_OFFERED.fullmatch(problem.strip()) for problem in problems)


def translate_error(exc: Exception, what: str, region: str = "") -> Exception:
    """A JobService client error as Landfall's kind: RateLimitedError (retry the same call later), CapacityError
    (try another plan), TransientError (retry) or PermanentError (record and acknowledge); anything else passes
    unchanged."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.ResourceExhausted):
        metric = quota_metric(exc)
        if is_rate_limit(exc):
            return RateLimitedError(
                f"{what}: rate limit {metric or 'of Vertex AI requests'} reached; will retry the same plan "
                f"({exc.message})",
                region=region,
                quota_metric=metric,
            )
        return CapacityError(f"{what}: quota exhausted: {exc.message}")
    if isinstance(exc, gexc.InvalidArgument) and offered_nowhere_here(str(exc.message)):
        return CapacityError(f"{what}: {exc.message}")
    if isinstance(
        exc,
        gexc.ServiceUnavailable
        | gexc.DeadlineExceeded
        | gexc.InternalServerError
        | gexc.TooManyRequests
        | gexc.Aborted,
    ):
        return TransientError(f"{what}: Vertex AI unavailable ({exc.__class__.__name__}: {exc.message}); will retry")
    if isinstance(exc, gexc.PermissionDenied):
        return missing_permission(exc, f"{what}: Vertex AI")
    if isinstance(exc, gexc.InvalidArgument | gexc.FailedPrecondition | gexc.NotFound):
        return PermanentError(f"{what}: Vertex AI refused the request ({exc.__class__.__name__}: {exc.message})")
    return exc


def is_canary_job(job: JobView) -> bool:
    """Whether job is a run's canary (docs/canary.md), by its label."""
    return job.labels.get(CANARY_LABEL) == CANARY_LABEL_VALUE


class VertexJobs:
    def __init__(self, project: str, client_for_region: Callable[[str], Any]) -> None:
        self._project = project
        self._client = client_for_region

    def parent(self, region: str) -> str:
        return f"projects/{self._project}/locations/{region}"

    def create(self, region: str, custom_job: dict[str, Any]) -> JobView:
        try:
            job = self._client(region).create_custom_job(parent=self.parent(region), custom_job=custom_job)
        except Exception as exc:
            raise translate_error(exc, f"CreateCustomJob in {region}", region) from exc
        return view(job)

    def get(self, name: str) -> JobView:
        region = name.split("/")[3]
        try:
            return view(self._client(region).get_custom_job(name=name))
        except Exception as exc:
            raise translate_error(exc, f"GetCustomJob {name}", region) from exc

    def cancel(self, name: str) -> bool:
        """Ask Vertex to cancel the job (best effort: it goes CANCELLING, then CANCELLED); False when it had ended
        already (Vertex answers FAILED_PRECONDITION)."""
        from google.api_core import exceptions as gexc

        region = name.split("/")[3]
        try:
            self._client(region).cancel_custom_job(name=name)
        except gexc.FailedPrecondition:
            return False
        except Exception as exc:
            raise translate_error(exc, f"CancelCustomJob {name}", region) from exc
        return True

    def list_labelled(self, region: str, *, page_size: int = 100) -> list[JobView]:
        """Every job in region carrying Landfall's run label (paged by the client's pager)."""
        try:
            pager = self._client(region).list_custom_jobs(
                request={"parent": self.parent(region), "filter": f"labels.{RUN_LABEL}:*", "page_size": page_size}
            )
            return [view(job) for job in pager]
        except Exception as exc:
            raise translate_error(exc, f"ListCustomJobs in {region}", region) from exc

    def list_changed(
        self, region: str, *, updated_since: str, created_since: str, page_size: int = 100
    ) -> list[JobView]:
        """The jobs carrying Landfall's run label that changed at or after updated_since, or were created at or after
        created_since (both RFC 3339): the reconciler's one read per region and pass (functions/reconciler/
        changes.py). Paged by the client's pager; a PermanentError here means Vertex refused the filter."""
        text = f'labels.{RUN_LABEL}:* AND (update_time>="{updated_since}" OR create_time>="{created_since}")'
        try:
            pager = self._client(region).list_custom_jobs(
                request={"parent": self.parent(region), "filter": text, "page_size": page_size}
            )
            return [view(job) for job in pager]
        except Exception as exc:
            raise translate_error(exc, f"ListCustomJobs in {region}", region) from exc

    def find_by_run(self, region: str, run_id: str, *, canary: bool = False) -> JobView | None:
        """The job labelled with run_id in region, if one was created (the dedupe behind exactly-once submit): the
        run's canary job (labelled CANARY_LABEL) when canary, else its long job."""
        try:
            pager = self._client(region).list_custom_jobs(
                request={"parent": self.parent(region), "filter": f'labels.{RUN_LABEL}="{run_id}"'}
            )
            jobs = [view(job) for job in pager]
        except Exception as exc:
            raise translate_error(exc, f"ListCustomJobs in {region}", region) from exc
        jobs = [j for j in jobs if is_canary_job(j) == canary]
        return jobs[0] if jobs else None
