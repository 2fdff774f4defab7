"""The fault control call: replace or read the emulator's fault plan while it runs.

It is a small gRPC service on the emulator's own port, `landfall.vertex_emulator.v1.FaultControl`, whose
messages are JSON documents (UTF-8 bytes) rather than protos, so any gRPC client can call it:

    SetFaults(plan JSON) -> {"ok": true, "plan": <plan>}     replaces the plan (see faults.py for its shape);
                                                            an invalid plan answers INVALID_ARGUMENT and the
                                                            old plan stays
    GetFaults({})        -> {"ok": true, "plan": <plan>, "unavailable_calls_left": N,
                             "calls": {"METHOD REGION": {"calls": N, "refused": N}, ...},
                             "per_minute": {"METHOD REGION": {"<minute start, epoch s>": {"calls": N,
                                                                                         "refused": N}}}}
                                                            (both since the plan was set)
    GetJobsInFlight({})  -> {"ok": true, "jobs": [{"name": ..., "state": "JOB_STATE_RUNNING", "labels": {...},
                             "gpus": {"NVIDIA_TESLA_T4": N}}, ...]}
                                                            read-only: the jobs not ended, with the GPUs of all their
                                                            replicas by type (a load test samples it to check GPU
                                                            caps without spending the CRUD quota it measures)

From Python: `set_faults("127.0.0.1:PORT", {"unavailable_calls": 2})`. The control calls never count as one
of the `unavailable_calls`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from deploy.vertex_emulator.faults import FaultPlan, FaultRules

SERVICE = "landfall.vertex_emulator.v1.FaultControl"
CALL_TIMEOUT_SECONDS = 10.0

Document = dict[str, object]
"""A JSON object, as the control calls send and answer them."""


def _encode(document: Mapping[str, object]) -> bytes:
    return json.dumps(document).encode()


def _decode(data: bytes) -> object:
    """Any JSON value: the receiving side checks that it is an object (see _document)."""
    return json.loads(data.decode() or "{}")


def _document(value: object, what: str) -> Document:
    if not isinstance(value, dict):
        raise TypeError(f"{what}: expected a JSON object, found {value!r}")
    return value


def plan_as_dict(rules: FaultRules) -> Document:
    """FaultRules as the JSON document SetFaults accepts (empty parts left out)."""
    document = dataclasses.asdict(rules)
    document = {key: value for key, value in document.items() if value}
    for key in ("quota_exhausted", "stockout", "unsupported_machine_type", "rate_limits"):
        if key in document:
            document[key] = [{k: v for k, v in entry.items() if v is not None} for entry in document[key]]
    return document


def control_handler(
    faults: FaultPlan, jobs_in_flight: Callable[[], list[Document]] | None = None
) -> grpc.GenericRpcHandler:
    """The server side, bound to the emulator's FaultPlan (and its jobs in flight, when given)."""
    from deploy.vertex_emulator.config import ConfigError

    def set_faults(request: object, context: grpc.ServicerContext) -> Document:
        if not isinstance(request, dict):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid fault plan: expected a JSON object, found {request!r}."
            )
        try:
            rules = faults.replace(request)
        except ConfigError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid fault plan: {error}")
        return {"ok": True, "plan": plan_as_dict(rules)}

    def get_faults(_request: object, _context: grpc.ServicerContext) -> Document:
        return {
            "ok": True,
            "plan": plan_as_dict(faults.current()),
            "unavailable_calls_left": faults.remaining_unavailable(),
            "calls": faults.counts(),
            "per_minute": faults.per_minute(),
        }

    def get_jobs_in_flight(_request: object, _context: grpc.ServicerContext) -> Document:
        return {"ok": True, "jobs": [] if jobs_in_flight is None else jobs_in_flight()}

    def handler(
        method: Callable[[object, grpc.ServicerContext], Document],
    ) -> grpc.RpcMethodHandler[object, Document]:
        return grpc.unary_unary_rpc_method_handler(method, request_deserializer=_decode, response_serializer=_encode)

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "SetFaults": handler(set_faults),
            "GetFaults": handler(get_faults),
            "GetJobsInFlight": handler(get_jobs_in_flight),
        },
    )


def _call(address: str, method: str, document: Mapping[str, object]) -> Document:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=_encode, response_deserializer=_decode)
        return _document(call(document, timeout=CALL_TIMEOUT_SECONDS), f"the answer to {method}")


def set_faults(address: str, plan: Mapping[str, object]) -> Document:
    """Replace the fault plan of the emulator at host:port; returns the plan now in force."""
    return _document(_call(address, "SetFaults", plan)["plan"], "the plan SetFaults answered")


def get_faults(address: str) -> Document:
    """The emulator's fault plan, how many UNAVAILABLE answers are still to come, and the calls per method and region
    it let through and refused for a rate limit (in all, and per minute)."""
    return _call(address, "GetFaults", {})


def get_jobs_in_flight(address: str) -> list[Document]:
    """The jobs of the emulator at host:port that have not ended: name, state, labels and GPUs by type (all
    replicas)."""
    jobs = _call(address, "GetJobsInFlight", {})["jobs"]
    if not isinstance(jobs, list):
        raise TypeError(f"the answer to GetJobsInFlight: expected a list of jobs, found {jobs!r}")
    return [_document(job, "a job GetJobsInFlight answered") for job in jobs]
