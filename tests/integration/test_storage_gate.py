"""The local stack's storage gate, through the real google-cloud-storage client over fake-gcs-server: each identity
gets what the deploy grants it and a refusal is Cloud Storage's own 403 naming the permission; a grant removed from
the policy is refused the way the cloud refuses it; a team's trainer identity reads and lists only its prefixes and
writes only its runs' folder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from google.api_core.exceptions import Forbidden
from google.cloud import storage

from deploy.gcp.config import DeployConfig, load_deploy_config
from deploy.local_iam.policy import Policy, deployed_policy, local_names
from deploy.local_iam.storage_gate import GateServer
from deploy.teams import parse_teams
from deploy.topology import load_topology, storage_as
from tests.conftest import Emulator

PROJECT = load_topology().project_id
LANDING, CODE, ARTIFACTS = "gate-landing", "gate-code", "gate-artifacts-us-central1"
DISPATCH = f"serviceAccount:landfall-dispatch@{PROJECT}.iam.gserviceaccount.com"
INGEST = f"serviceAccount:landfall-ingest@{PROJECT}.iam.gserviceaccount.com"
TEAM_A = f"serviceAccount:lf-team-gate-a@{PROJECT}.iam.gserviceaccount.com"
TEAMS = parse_teams(
    {
        "schema_version": 1,
        "teams": [
            {"name": "gate-a", "owns": [{"bucket": "*", "prefix": "teams-data/a/"}], "monthly_budget_usd": 10.0},
            {"name": "gate-b", "owns": [{"bucket": "*", "prefix": "teams-data/b/"}], "monthly_budget_usd": 10.0},
        ],
    }
)


def policy(config: DeployConfig | None = None) -> Policy:
    topology, config = load_topology(), config or load_deploy_config()
    names = local_names(topology, config, {"us-central1": ARTIFACTS}, LANDING, CODE)
    return deployed_policy(config, names, TEAMS, topology.runs_prefix)


def without_grant(account: str, role: str, on: str) -> DeployConfig:
    """The topology's deploy configuration with one grant of one account taken out."""
    config = load_deploy_config()
    accounts = tuple(
        replace(a, grants=tuple(g for g in a.grants if (g.role, g.on) != (role, on))) if a.key == account else a
        for a in config.service_accounts
    )
    assert accounts != config.service_accounts, f"{account} holds no {role} on {on}"
    return replace(config, service_accounts=accounts)


class _Switch:
    def __init__(self) -> None:
        self.current = policy()

    def __call__(self) -> Policy:
        return self.current


@pytest.fixture(scope="module")
def gate(gcs_emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GateServer, _Switch]]:
    owner = storage.Client(project=PROJECT)
    for name in (LANDING, CODE, ARTIFACTS):
        if owner.lookup_bucket(name) is None:
            owner.create_bucket(name)
    switch = _Switch()
    record = tmp_path_factory.mktemp("gate") / "used.jsonl"
    server = GateServer(0, gcs_emulator.endpoint, switch, record=record, quiet=True)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, switch
    finally:
        server.shutdown()


def client_as(server: GateServer, member: str, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_as(server.base, member))
    return storage.Client(project=PROJECT)


def test_a_grant_lets_its_call_through_and_a_missing_one_is_cloud_storages_403(
    gate: tuple[GateServer, _Switch], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = gate
    run = uuid.uuid4().hex[:8]
    dispatch = client_as(server, DISPATCH, monkeypatch)
    listing = dispatch.bucket(ARTIFACTS).blob(f"runs/{run}/data-files.jsonl")
    listing.upload_from_string('{"name": "x"}\n')
    assert listing.download_as_bytes() == b'{"name": "x"}\n'
    with pytest.raises(Forbidden) as refused:
        dispatch.bucket(ARTIFACTS).blob(f"models/{run}/model.pt").upload_from_string(b"w")
    message = str(refused.value)
    assert "403" in message
    assert (
        f"landfall-dispatch@{PROJECT}.iam.gserviceaccount.com does not have storage.objects.create access to the "
        "Google Cloud Storage object. Permission 'storage.objects.create' denied on resource (or it may not exist)."
    ) in message
    ingest = client_as(server, INGEST, monkeypatch)
    with pytest.raises(Forbidden, match=r"storage\.objects\.create"):
        ingest.bucket(LANDING).blob(f"datasets/{run}/_SUCCESS").upload_from_string(b"")


def test_a_grant_removed_from_the_topology_is_refused_with_its_permission(
    gate: tuple[GateServer, _Switch], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, switch = gate
    owner = storage.Client(project=PROJECT)
    name = f"datasets/{uuid.uuid4().hex[:8]}/part-0.csv"
    owner.bucket(LANDING).blob(name).upload_from_string(b"a,b\n1,2\n")
    ingest = client_as(server, INGEST, monkeypatch)
    assert ingest.bucket(LANDING).blob(name).download_as_bytes() == b"a,b\n1,2\n"
    switch.current = policy(without_grant("ingest", "roles/storage.objectViewer", "bucket:landing"))
    try:
        with pytest.raises(Forbidden, match=r"Permission 'storage.objects.get' denied"):
            ingest.bucket(LANDING).blob(name).download_as_bytes()
        with pytest.raises(Forbidden, match=r"storage.objects.list access to the Google Cloud Storage bucket"):
            list(ingest.list_blobs(LANDING, prefix="datasets/"))
    finally:
        switch.current = policy()


def test_a_team_identity_reads_its_own_prefixes_and_writes_its_own_runs_only(
    gate: tuple[GateServer, _Switch], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = gate
    owner = storage.Client(project=PROJECT)
    for team in ("a", "b"):
        owner.bucket(LANDING).blob(f"teams-data/{team}/part-0.csv").upload_from_string(f"team,{team}\n".encode())
    team_a = client_as(server, TEAM_A, monkeypatch)
    listed = [b.name for b in team_a.list_blobs(LANDING, prefix="teams-data/a/")]
    assert listed == ["teams-data/a/part-0.csv"]
    assert team_a.bucket(LANDING).blob("teams-data/a/part-0.csv").download_as_bytes() == b"team,a\n"
    for call in (
        lambda: list(team_a.list_blobs(LANDING, prefix="teams-data/b/")),
        lambda: list(team_a.list_blobs(LANDING)),
        lambda: team_a.bucket(LANDING).blob("teams-data/b/part-0.csv").download_as_bytes(),
        lambda: team_a.bucket(LANDING).blob("teams-data/b/_SUCCESS").upload_from_string(b""),
        lambda: team_a.bucket(ARTIFACTS).blob("runs/gate-b/r1/model/model.pt").upload_from_string(b"w"),
    ):
        with pytest.raises(Forbidden, match=r"Permission 'storage\.objects"):
            call()
    mine = team_a.bucket(ARTIFACTS).blob("runs/gate-a/r1/model/model.pt")
    mine.upload_from_string(b"w1")
    mine.upload_from_string(b"w2")  # objectUser may replace (storage.objects.delete)
    assert mine.download_as_bytes() == b"w2"


def test_every_permission_used_is_recorded_with_the_binding_that_allowed_it(
    gate: tuple[GateServer, _Switch], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, switch = gate
    switch.current = policy()
    assert server.record is not None
    # a grant used and a call refused, here (the module's other tests may run on another worker)
    run = uuid.uuid4().hex[:8]
    client_as(server, DISPATCH, monkeypatch).bucket(ARTIFACTS).blob(f"runs/{run}/x").upload_from_string(b"x")
    with pytest.raises(Forbidden):
        client_as(server, TEAM_A, monkeypatch).bucket(LANDING).blob("teams-data/b/x.csv").download_as_bytes()
    lines = [json.loads(line) for line in Path(server.record).read_text().splitlines()]
    allowed = {(x["member"], x["permission"], x.get("role")) for x in lines if x["allowed"]}
    assert (DISPATCH, "storage.objects.create", "roles/storage.objectUser") in allowed
    assert any(not x["allowed"] and x["member"] == TEAM_A for x in lines)


def test_links_the_server_returns_come_back_through_the_gate(
    gate: tuple[GateServer, _Switch], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = gate
    storage.Client(project=PROJECT).bucket(LANDING).blob("teams-data/a/linked.csv").upload_from_string(b"x\n")
    team_a = client_as(server, TEAM_A, monkeypatch)
    (listed,) = [b for b in team_a.list_blobs(LANDING, prefix="teams-data/a/linked")]
    assert listed.media_link.startswith(storage_as(server.base, TEAM_A))
    assert listed.download_as_bytes() == b"x\n"
    # an object's content is never rewritten, even JSON naming the server's address
    content = json.dumps({"mediaLink": f"{server.upstream_base}/download/x"}).encode()
    mine = team_a.bucket(ARTIFACTS).blob("runs/gate-a/r2/metrics.json")
    mine.upload_from_string(content, content_type="application/json")
    assert mine.download_as_bytes() == content
    big = b"y" * (9 << 20)  # over the client's multipart limit: a resumable upload, its session URL rewritten too
    team_a.bucket(ARTIFACTS).blob("runs/gate-a/r2/model/big.bin").upload_from_string(big)
    with pytest.raises(Forbidden, match=r"storage\.objects\.create"):
        team_a.bucket(ARTIFACTS).blob("runs/gate-b/r2/model/big.bin").upload_from_string(big)
