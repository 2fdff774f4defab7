"""The gRPC face of the emulator: `google.cloud.aiplatform.v1.JobService` for custom jobs, and (models.py)
`google.cloud.aiplatform.v1.ModelService` with `google.longrunning.Operations.GetOperation` for its operations.

The aiplatform package ships no servicer classes, so the service is registered with
`grpc.method_handlers_generic_handler` and the SDK's own proto-plus types do the (de)serialization. Any
location is accepted: the client decides the region through the parent it sends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
import proto
from google.cloud.aiplatform_v1.types import (
    CancelCustomJobRequest,
    CreateCustomJobRequest,
    CustomJob,
    DeleteCustomJobRequest,
    DeleteModelRequest,
    DeleteModelVersionRequest,
    DeleteOperationMetadata,
    GetCustomJobRequest,
    GetModelRequest,
    JobState,
    ListCustomJobsRequest,
    ListCustomJobsResponse,
    ListModelsRequest,
    ListModelsResponse,
    ListModelVersionsRequest,
    ListModelVersionsResponse,
    MergeVersionAliasesRequest,
    Model,
    UpdateModelRequest,
    UploadModelRequest,
)
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from deploy.topology import PRINCIPAL_METADATA
from deploy.vertex_emulator import events
from deploy.vertex_emulator.control import control_handler
from deploy.vertex_emulator.faults import (
    SERVICE_NAME,
    FaultPlan,
    RateLimit,
    create_refusal,
    rate_limit_message,
    rate_quota,
)
from deploy.vertex_emulator.filters import FilterError, parse_filter
from deploy.vertex_emulator.iam import IamCheck, PermissionRefused, caller
from deploy.vertex_emulator.logs import PROCESSES_FILE, job_dir
from deploy.vertex_emulator.models import SERVICE as MODEL_SERVICE
from deploy.vertex_emulator.models import ModelService
from deploy.vertex_emulator.paging import PageTokenError, page
from deploy.vertex_emulator.replicas import kill_leftovers
from deploy.vertex_emulator.rpc import RpcError, parse_parent
from deploy.vertex_emulator.runner import TERMINAL_STATES, JobRunner, RunnerSettings
from deploy.vertex_emulator.store import JobStore, copy_job, job_id_of
from deploy.vertex_emulator.validation import format_errors, validate_custom_job
from deploy.vertex_emulator.wellknown import timestamp

SERVICE = "google.cloud.aiplatform.v1.JobService"
OPERATIONS_SERVICE = "google.longrunning.Operations"
OUTPUT_ONLY_FIELDS = ("error", "start_time", "end_time", "web_access_uris")
RESTART_MESSAGE = (
    "The Vertex emulator stopped while this job was active, and the job's replica processes stopped with it. "
    "Submit the job again."
)


@dataclass(frozen=True)
class EmulatorConfig:
    """Settings of one emulator process (see __main__.py for the flags)."""

    project: str
    state_dir: Path
    events_topic: str | None
    runner: RunnerSettings
    faults: FaultPlan
    iam: str = ""
    """The local stack's IAM (the storage gate's base URL, deploy/vertex_emulator/iam.py); "" checks no caller."""


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_job_name(name: str) -> tuple[str, str, str]:
    parts = name.split("/")
    if (
        len(parts) != 6
        or parts[0] != "projects"
        or parts[2] != "locations"
        or parts[4] != "customJobs"
        or not parts[5].isdigit()
    ):
        raise RpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f'Invalid CustomJob name "{name}": expected '
            '"projects/{project}/locations/{location}/customJobs/{id}" with a numeric id.',
        )
    return parts[1], parts[3], parts[5]


class JobService:
    """The RPC implementations; each takes a request message and returns the response message."""

    def __init__(self, config: EmulatorConfig) -> None:
        self._config = config
        self.faults = config.faults
        self._iam = IamCheck(config.iam) if config.iam else None
        self._store = JobStore(config.state_dir)
        self._publisher = events.EventPublisher(config.project, config.events_topic)
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()
        self._fail_orphans()

    # -- startup and shutdown ---------------------------------------------------------------------------

    def _fail_orphans(self) -> None:
        """Jobs left active by a previous emulator process cannot continue: mark them FAILED."""
        for job in self._store.all():
            job_id = job_id_of(job.name)
            kill_leftovers(job_dir(self._config.state_dir, job_id) / PROCESSES_FILE)
            if job.state in TERMINAL_STATES:
                continue
            moment = _now()

            def change(stored: CustomJob, moment: datetime = moment) -> None:
                stored.state = JobState.JOB_STATE_FAILED
                stored.error = status_pb2.Status(code=code_pb2.ABORTED, message=RESTART_MESSAGE)
                stored.end_time = timestamp(moment)
                stored.update_time = timestamp(moment)

            self._store.update(job_id, change)
            self._publisher.emit(events.ServiceLine(job_id, RESTART_MESSAGE, "ERROR"))
            self._publisher.emit(events.ServiceLine(job_id, events.FAILED, "ERROR"))

    def shutdown(self) -> None:
        """Stop every replica of every job (children included) and flush pending events."""
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.request_shutdown()
        for runner in runners:
            runner.join(timeout=30)
        self._publisher.close()

    def _forget_runner(self, job_id: str) -> None:
        with self._lock:
            self._runners.pop(job_id, None)

    # -- RPCs -------------------------------------------------------------------------------------------

    def authorize_create(self, member: str, request: CreateCustomJobRequest) -> None:
        """The caller may create jobs in the project and act as the account the job runs as (iam.py)."""
        if self._iam is not None:
            project, location = parse_parent(request.parent)
            account = request.custom_job.job_spec.service_account
            self._iam.require(member, "aiplatform.customJobs.create", project, location, account)

    def authorize_cancel(self, member: str, request: CancelCustomJobRequest) -> None:
        if self._iam is not None:
            project, location, _ = _parse_job_name(request.name)
            self._iam.require(member, "aiplatform.customJobs.cancel", project, location)

    def authorize(self, permission: str) -> Callable[[str, Any], None]:
        """A check that the caller holds permission on the project the request names (iam.py), for the calls that
        need nothing more: reading, listing and deleting jobs; the Model Registry's calls."""

        def check(member: str, request: Any) -> None:
            if self._iam is not None:
                project, location = _request_place(request)
                self._iam.require(member, permission, project, location)

        return check

    def create_custom_job(self, request: CreateCustomJobRequest) -> CustomJob:
        project, location = parse_parent(request.parent)
        job = copy_job(request.custom_job)
        errors = validate_custom_job(job)
        if errors:
            raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, format_errors(errors))
        refusal = create_refusal(self.faults.current(), job.job_spec, location)
        if refusal is not None:
            raise RpcError(grpc.StatusCode[refusal[0]], refusal[1])
        job_id = self._store.new_id()
        moment = _now()
        for output_only in OUTPUT_ONLY_FIELDS:
            job.__delattr__(output_only)
        job.name = f"projects/{project}/locations/{location}/customJobs/{job_id}"
        job.state = JobState.JOB_STATE_PENDING
        job.create_time = timestamp(moment)
        job.update_time = timestamp(moment)
        self._store.put(job)
        self._publisher.emit(events.ServiceLine(job_id, events.PROVISIONING))
        runner = JobRunner(
            job_id,
            store=self._store,
            publisher=self._publisher,
            settings=self._config.runner,
            project=project,
            region=location,
            faults=self.faults,
            on_exit=self._forget_runner,
        )
        with self._lock:
            self._runners[job_id] = runner
        runner.start()
        return job

    def get_custom_job(self, request: GetCustomJobRequest) -> CustomJob:
        return self._existing(request.name)

    def list_custom_jobs(self, request: ListCustomJobsRequest) -> ListCustomJobsResponse:
        project, location = parse_parent(request.parent)
        prefix = f"projects/{project}/locations/{location}/customJobs/"
        try:
            matches = parse_filter(request.filter)
            jobs = [job for job in self._store.all() if job.name.startswith(prefix) and matches(job)]
            chosen, next_token = page(
                jobs, filter_text=request.filter, page_size=request.page_size, page_token=request.page_token
            )
        except (FilterError, PageTokenError) as error:
            raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
        return ListCustomJobsResponse(custom_jobs=chosen, next_page_token=next_token)

    def jobs_in_flight(self) -> list[dict[str, object]]:
        """The jobs not ended (the control call GetJobsInFlight): name, state, labels, and the GPUs of all their
        replicas by accelerator type."""

        def look(job: CustomJob) -> dict[str, object] | None:
            if job.state in TERMINAL_STATES:
                return None
            kinds: dict[str, int] = {}
            for pool in job.job_spec.worker_pool_specs:
                if pool.machine_spec.accelerator_count:
                    kind = pool.machine_spec.accelerator_type.name
                    kinds[kind] = kinds.get(kind, 0) + pool.machine_spec.accelerator_count * pool.replica_count
            return {"name": job.name, "state": job.state.name, "labels": dict(job.labels), "gpus": kinds}

        return self._store.scan(look)

    def cancel_custom_job(self, request: CancelCustomJobRequest) -> empty_pb2.Empty:
        job = self._existing(request.name)
        job_id = job_id_of(job.name)
        if job.state in TERMINAL_STATES:
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cannot cancel CustomJob {job.name}: it is already in the terminal state {job.state.name}.",
            )
        moment = _now()

        def change(stored: CustomJob) -> bool:
            if stored.state in TERMINAL_STATES:
                return False
            stored.state = JobState.JOB_STATE_CANCELLING
            stored.update_time = timestamp(moment)
            return True

        self._store.update(job_id, change)
        self._publisher.emit(events.ServiceLine(job_id, events.CANCELLING))
        with self._lock:
            runner = self._runners.get(job_id)
        if runner is not None:
            runner.cancel()
        return empty_pb2.Empty()

    def delete_custom_job(self, request: DeleteCustomJobRequest) -> operations_pb2.Operation:
        job = self._existing(request.name)
        if job.state not in TERMINAL_STATES:
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"CustomJob {job.name} is in state {job.state.name} and cannot be deleted. "
                "Cancel it first and delete it once it has ended.",
            )
        project, location, job_id = _parse_job_name(job.name)
        self._store.delete(job_id)
        metadata = any_pb2.Any()
        metadata.Pack(DeleteOperationMetadata.pb(DeleteOperationMetadata(generic_metadata={"create_time": _now()})))
        response = any_pb2.Any()
        response.Pack(empty_pb2.Empty())
        return operations_pb2.Operation(
            name=f"projects/{project}/locations/{location}/operations/{job_id}",
            metadata=metadata,
            done=True,
            response=response,
        )

    def _existing(self, name: str) -> CustomJob:
        _parse_job_name(name)
        job = self._store.get(job_id_of(name))
        if job is None or job.name != name:
            raise RpcError(grpc.StatusCode.NOT_FOUND, f'The CustomJob "{name}" does not exist.')
        return job


UNAVAILABLE_MESSAGE = "The service is currently unavailable."
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailer carrying a google.rpc.Status (with its details), which google-api-core reads into the exception."""


_Request = TypeVar("_Request", bound=proto.Message)
_Response = TypeVar("_Response")


def _request_place(request: object) -> tuple[str, str]:
    """(project, region) a JobService request names through its parent or job name; ("", "") when unreadable."""
    path = str(getattr(request, "parent", "") or getattr(request, "name", ""))
    parts = path.split("/")
    if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "locations":
        return parts[1], parts[3]
    return "", ""


def rate_limit_status(rule: RateLimit, project: str, region: str) -> status_pb2.Status:
    """RESOURCE_EXHAUSTED as Google answers a rate quota over its limit: the message, google.rpc.ErrorInfo (reason
    RATE_LIMIT_EXCEEDED, the quota metric and limit in its metadata) and google.rpc.QuotaFailure."""
    quota = rate_quota(rule.method)
    info = error_details_pb2.ErrorInfo(
        reason="RATE_LIMIT_EXCEEDED",
        domain="googleapis.com",
        metadata={
            "service": SERVICE_NAME,
            "consumer": f"projects/{project}",
            "quota_metric": quota.metric,
            "quota_limit": quota.limit_name,
            "quota_limit_value": str(rule.limit),
            "quota_location": region,
        },
    )
    failure = error_details_pb2.QuotaFailure(
        violations=[
            error_details_pb2.QuotaFailure.Violation(
                subject=f"projects/{project}",
                description=f"{quota.metric_title} per minute per region: limit {rule.limit}",
                api_service=SERVICE_NAME,
                quota_metric=quota.metric,
                quota_id=quota.limit_name,
                quota_dimensions={"region": region},
                quota_value=rule.limit,
            )
        ]
    )
    details = []
    for detail in (info, failure):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    return status_pb2.Status(
        code=code_pb2.RESOURCE_EXHAUSTED, message=rate_limit_message(rule, project), details=details
    )


def _proto_plus(request_type: type[_Request]) -> Callable[[bytes], _Request]:
    """The request deserializer for one of the SDK's proto-plus request types."""

    def deserialize(payload: bytes) -> _Request:
        request = request_type.deserialize(payload)  # proto-plus annotates it as returning any Message
        if not isinstance(request, request_type):
            raise TypeError(f"expected a {request_type.__name__}, got {type(request).__name__}")
        return request

    return deserialize


def _unary(
    faults: FaultPlan,
    name: str,
    method: Callable[[_Request], _Response],
    deserialize: Callable[[bytes], _Request],
    response_serializer: Callable[[_Response], bytes],
    authorize: Callable[[str, _Request], None] | None = None,
) -> grpc.RpcMethodHandler[_Request, _Response]:
    def handle(request: _Request, context: grpc.ServicerContext) -> _Response:
        if faults.take_unavailable():
            context.abort(grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_MESSAGE)
        if authorize is not None:
            try:
                authorize(caller(context.invocation_metadata(), PRINCIPAL_METADATA), request)
            except (PermissionRefused, RpcError) as refused:
                context.abort(refused.code, refused.message)
            except OSError as exc:  # the stack's IAM did not answer (URLError and timeouts are OSErrors): try again
                context.abort(grpc.StatusCode.UNAVAILABLE, f"the IAM check did not answer ({exc}); try again")
        project, region = _request_place(request)
        limited = faults.take_rate(name, region)
        if limited is not None:
            status = rate_limit_status(limited, project, region)
            # The rich status rides in the trailer gRPC reserves for it, as grpc_status.rpc_status.to_status sends it.
            context.set_trailing_metadata(((STATUS_DETAILS_KEY, status.SerializeToString()),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, status.message)
        try:
            return method(request)
        except RpcError as error:
            context.abort(error.code, error.message)

    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=deserialize, response_serializer=response_serializer
    )


def _model_handlers(
    faults: FaultPlan, models: ModelService, authorize: Callable[[str], Callable[[str, Any], None]]
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """ModelService's methods (models.py), each held to the permission Vertex AI checks for it."""
    operation = operations_pb2.Operation.SerializeToString
    table: list[tuple[str, Callable[[Any], Any], type[proto.Message], Callable[[Any], bytes], str]] = [
        ("UploadModel", models.upload_model, UploadModelRequest, operation, "upload"),
        ("GetModel", models.get_model, GetModelRequest, Model.serialize, "get"),
        ("ListModels", models.list_models, ListModelsRequest, ListModelsResponse.serialize, "list"),
        (
            "ListModelVersions",
            models.list_model_versions,
            ListModelVersionsRequest,
            ListModelVersionsResponse.serialize,
            "list",
        ),
        ("MergeVersionAliases", models.merge_version_aliases, MergeVersionAliasesRequest, Model.serialize, "update"),
        ("UpdateModel", models.update_model, UpdateModelRequest, Model.serialize, "update"),
        ("DeleteModelVersion", models.delete_model_version, DeleteModelVersionRequest, operation, "delete"),
        ("DeleteModel", models.delete_model, DeleteModelRequest, operation, "delete"),
    ]
    return {
        name: _unary(faults, name, method, _proto_plus(request_type), serialize, authorize(f"aiplatform.models.{verb}"))
        for name, method, request_type, serialize, verb in table
    }


def build_server(
    service: JobService, host: str, port: int, models: ModelService | None = None
) -> tuple[grpc.Server, int]:
    """A gRPC server with the JobService (and, given one, the ModelService and google.longrunning.Operations)
    registered; returns it (not yet started) and the bound port."""
    # so_reuseport off: a second emulator on a taken port must fail instead of silently sharing it.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
    faults = service.faults

    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "CreateCustomJob": _unary(
            faults,
            "CreateCustomJob",
            service.create_custom_job,
            _proto_plus(CreateCustomJobRequest),
            CustomJob.serialize,
            service.authorize_create,
        ),
        "GetCustomJob": _unary(
            faults,
            "GetCustomJob",
            service.get_custom_job,
            _proto_plus(GetCustomJobRequest),
            CustomJob.serialize,
            service.authorize("aiplatform.customJobs.get"),
        ),
        "ListCustomJobs": _unary(
            faults,
            "ListCustomJobs",
            service.list_custom_jobs,
            _proto_plus(ListCustomJobsRequest),
            ListCustomJobsResponse.serialize,
            service.authorize("aiplatform.customJobs.list"),
        ),
        "CancelCustomJob": _unary(
            faults,
            "CancelCustomJob",
            service.cancel_custom_job,
            _proto_plus(CancelCustomJobRequest),
            empty_pb2.Empty.SerializeToString,
            service.authorize_cancel,
        ),
        "DeleteCustomJob": _unary(
            faults,
            "DeleteCustomJob",
            service.delete_custom_job,
            _proto_plus(DeleteCustomJobRequest),
            operations_pb2.Operation.SerializeToString,
            service.authorize("aiplatform.customJobs.delete"),
        ),
    }
    generic = [grpc.method_handlers_generic_handler(SERVICE, handlers), control_handler(faults, service.jobs_in_flight)]
    if models is not None:
        handlers_of_models = _model_handlers(faults, models, service.authorize)
        generic.append(grpc.method_handlers_generic_handler(MODEL_SERVICE, handlers_of_models))
        get_operation = _unary(
            faults,
            "GetOperation",
            models.get_operation,
            operations_pb2.GetOperationRequest.FromString,
            operations_pb2.Operation.SerializeToString,
        )
        generic.append(grpc.method_handlers_generic_handler(OPERATIONS_SERVICE, {"GetOperation": get_operation}))
    server.add_generic_rpc_handlers(generic)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise OSError(
            f"Could not listen on {host}:{port}: the port is in use or the address is not local. "
            "Choose a free port (or --port 0 for any)."
        )
    return server, bound


def add_tls_port(server: grpc.Server, host: str, certificate: bytes, private_key: bytes) -> int:
    """Also listen with TLS (PEM certificate chain and key) on a free port; returns it.

    The high-level SDK (`aiplatform.init(api_endpoint=...)`) always opens a TLS channel; a client trusting the
    certificate (gRPC reads extra roots from GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) reaches the emulator through it.
    """
    credentials = grpc.ssl_server_credentials([(private_key, certificate)])
    try:
        bound = server.add_secure_port(f"{host}:0", credentials)
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise OSError(f"Could not listen with TLS on {host}: check the address and the --tls-cert/--tls-key files.")
    return bound
