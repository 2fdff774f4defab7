"""The Vertex emulator holds CreateCustomJob and CancelCustomJob to the deploy's IAM, through the real JobServiceClient
on the channel a function uses (functions/gcp/clients.py emulator_channel, naming its account): the caller needs
`aiplatform.customJobs.create` on the project and `iam.serviceAccounts.actAs` on the account the job runs as, and is
refused with PERMISSION_DENIED naming the permission, as Vertex AI refuses it; a grant removed from the topology is
refused the same way; a call naming nobody is the owner's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from google.api_core.exceptions import PermissionDenied
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

from deploy.gcp.config import DeployConfig, load_deploy_config
from deploy.local_iam.policy import Policy, deployed_policy, local_names
from deploy.local_iam.storage_gate import GateServer
from deploy.teams import parse_teams
from deploy.topology import load_topology, storage_as
from functions.gcp.clients import emulator_channel

from .harness import PARENT, PROJECT, EmulatorProcess, probe_job, probe_pool

TEAM = "iam-a"
TEAMS = parse_teams(
    {
        "schema_version": 1,
        "teams": [{"name": TEAM, "owns": [{"bucket": "*", "prefix": "a/"}], "monthly_budget_usd": 1.0}],
    }
)


def account(name: str) -> str:
    return f"{name}@{PROJECT}.iam.gserviceaccount.com"


def policy(config: DeployConfig | None = None) -> Policy:
    topology = load_topology()
    config = config or load_deploy_config()
    names = local_names(topology, config, {"us-central1": "art"}, "land", "code")
    return deployed_policy(config, names, TEAMS, topology.runs_prefix)


@pytest.fixture()
def gate() -> Iterator[tuple[GateServer, list[Policy]]]:
    current = [policy()]
    server = GateServer(0, "http://127.0.0.1:9", lambda: current[0], quiet=True)  # the check never reaches storage
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, current
    server.shutdown()


def client_as(emulator: EmulatorProcess, member: str) -> aiplatform_v1.JobServiceClient:
    channel = emulator_channel(storage_as(emulator.address, member) if member else emulator.address)
    return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))


def test_jobs_are_created_and_cancelled_only_by_whoever_the_deploy_lets(
    gate: tuple[GateServer, list[Policy]], start_emulator: Callable[..., EmulatorProcess], tmp_path: Path
) -> None:
    server, current = gate
    emulator = start_emulator("--iam", server.base)
    dispatch = client_as(emulator, f"serviceAccount:{account('landfall-dispatch')}")

    def job(runs_as: str) -> aiplatform_v1.CustomJob:
        spec = probe_job([probe_pool(tmp_path / "out.json", "--sleep", "60")])
        spec["job_spec"]["service_account"] = runs_as
        return aiplatform_v1.CustomJob(spec)

    team_job = dispatch.create_custom_job(parent=PARENT, custom_job=job(account(f"lf-team-{TEAM}")))
    trainer_job = dispatch.create_custom_job(parent=PARENT, custom_job=job(account("landfall-trainer")))
    with pytest.raises(PermissionDenied, match=r"Permission 'iam.serviceAccounts.actAs' denied .*stranger@"):
        dispatch.create_custom_job(parent=PARENT, custom_job=job(account("stranger")))
    ingest = client_as(emulator, f"serviceAccount:{account('landfall-ingest')}")
    refused = (
        r"Permission 'aiplatform.customJobs.create' denied on resource "
        rf"'//aiplatform.googleapis.com/{PARENT}' \(or it may not exist\)"
    )
    with pytest.raises(PermissionDenied, match=refused):
        ingest.create_custom_job(parent=PARENT, custom_job=job(account("landfall-trainer")))
    with pytest.raises(PermissionDenied, match=r"aiplatform.customJobs.cancel"):
        ingest.cancel_custom_job(name=team_job.name)
    dispatch.cancel_custom_job(name=team_job.name)
    client_as(emulator, "").cancel_custom_job(name=trainer_job.name)  # the owner: nobody named

    config = load_deploy_config()
    accounts = tuple(
        replace(a, grants=tuple(g for g in a.grants if g.role != "roles/iam.serviceAccountUser"))
        if a.key == "dispatch"
        else a
        for a in config.service_accounts
    )
    current[0] = policy(replace(config, service_accounts=accounts))
    with pytest.raises(PermissionDenied, match=r"to act as service account landfall-trainer@"):
        dispatch.create_custom_job(parent=PARENT, custom_job=job(account("landfall-trainer")))


def test_reading_and_listing_jobs_need_their_permissions_too(
    gate: tuple[GateServer, list[Policy]], start_emulator: Callable[..., EmulatorProcess], tmp_path: Path
) -> None:
    """Every JobService call is held to the permission Vertex AI checks for it: the listener (roles/aiplatform.user)
    reads and lists jobs; ingest, which holds no Vertex AI role, is refused both, naming the permission."""
    server, _ = gate
    emulator = start_emulator("--iam", server.base)
    listener = client_as(emulator, f"serviceAccount:{account('landfall-listener')}")
    made = client_as(emulator, "").create_custom_job(
        parent=PARENT, custom_job=aiplatform_v1.CustomJob(probe_job([probe_pool(tmp_path / "o.json")]))
    )
    assert listener.get_custom_job(name=made.name).name == made.name
    assert [j.name for j in listener.list_custom_jobs(parent=PARENT)] == [made.name]
    ingest = client_as(emulator, f"serviceAccount:{account('landfall-ingest')}")
    with pytest.raises(PermissionDenied, match=r"Permission 'aiplatform.customJobs.get' denied"):
        ingest.get_custom_job(name=made.name)
    with pytest.raises(PermissionDenied, match=r"Permission 'aiplatform.customJobs.list' denied"):
        list(ingest.list_custom_jobs(parent=PARENT))


def test_an_iam_check_that_does_not_answer_is_unavailable_not_a_refusal(
    start_emulator: Callable[..., EmulatorProcess],
) -> None:
    """Every call is checked now: a gate that does not answer makes the call UNAVAILABLE (the client's transient
    error, retried), never a refusal or an unknown error."""
    from google.api_core.exceptions import ServiceUnavailable

    from deploy.local.processes import free_port

    emulator = start_emulator("--iam", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    listener = client_as(emulator, f"serviceAccount:{account('landfall-listener')}")
    with pytest.raises(ServiceUnavailable, match="the IAM check did not answer"):
        listener.get_custom_job(name=f"{PARENT}/customJobs/1", timeout=30)
