"""Who sees what on the dashboard (landfall/ui/viewer.py, docs/teams.md "Who sees what"): with members and operators
in the teams file, a member sees and acts on their teams' runs only, an operator on all, an unknown caller on none;
without them, everyone sees everything. Over the fake Source; the browser test is tests/integration/test_ui_browser.py.
"""

from __future__ import annotations

import tomllib
import warnings
from dataclasses import replace

import pytest

from deploy.teams import Teams, TeamsError, parse_teams
from landfall.access import chosen_identity, request_identity, viewer_for
from landfall.errors import CommandError
from landfall.ui.app import create_app
from landfall.ui.hosts import LOOPBACK
from schemas.run_record import RunRecord
from schemas.team_ledger import RunCharge
from tests.fakes.ui import FakeSource, canary_and_fallback, failed, succeeded

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

FILE = """
operators = ["group:platform@example.com", "user:ops@example.com"]
[[teams]]
name = "vision"
owns = [{bucket = "*", prefix = "datasets/vision/"}]
monthly_budget_usd = 100.0
members = ["user:ana@example.com", "domain:vision.example.com"]
[[teams]]
name = "speech"
owns = [{bucket = "*", prefix = "datasets/speech/"}]
monthly_budget_usd = 100.0
members = ["user:bo@example.com", "user:ana@example.com"]
"""


def _teams(text: str = FILE) -> Teams:
    return parse_teams(tomllib.loads(text))


def _of(run: RunRecord, team: str | None) -> RunRecord:
    return replace(run, team=RunCharge(team) if team else None)


def _runs() -> list[RunRecord]:
    return [
        _of(succeeded("run-vision"), "vision"),
        _of(failed("run-speech"), "speech"),
        _of(canary_and_fallback("run-nobody"), None),
    ]


def _client(source: FakeSource, identity: str, teams: Teams | None = None) -> TestClient:
    known = _teams() if teams is None else teams
    app = create_app(source, frozenset({"cancel"}), hosts=LOOPBACK, access=lambda: known, identity=identity)
    return TestClient(app, base_url="http://127.0.0.1:8090")


def _listed(c: TestClient) -> set[str]:
    page = c.get("/runs").text
    return {r for r in ("run-vision", "run-speech", "run-nobody") if r in page}


def test_the_teams_file_names_members_and_operators_and_refuses_what_is_not_a_principal() -> None:
    teams = _teams()
    assert teams.scoped and teams.teams_of("user:ana@example.com") == ("vision", "speech")
    assert teams.teams_of("user:cy@vision.example.com") == ("vision",)  # through domain:
    assert teams.is_operator("user:ops@example.com") and not teams.is_operator("user:ana@example.com")
    assert not _teams(FILE.replace("operators", "#").replace("members", "#members")).scoped
    with pytest.raises(TeamsError, match=r"team 'vision': members: 'ana@example.com' is not an IAM principal"):
        _teams(FILE.replace('"user:ana@example.com", "domain', '"ana@example.com", "domain'))
    with pytest.raises(TeamsError, match="operators: 'root' is not an IAM principal"):
        _teams(FILE.replace('"group:platform@example.com", ', '"root", '))


def test_a_member_sees_their_teams_runs_only_and_cannot_open_or_cancel_another_teams() -> None:
    source = FakeSource(_runs())
    bo = _client(source, "user:bo@example.com")
    assert _listed(bo) == {"run-speech"}
    assert bo.get("/runs?team=vision").status_code == 200 and _listed(bo) == {"run-speech"}
    assert "run-vision" not in bo.get("/runs?team=vision").text
    refused = bo.get("/runs/run-vision")
    assert refused.status_code == 403 and "belongs to team &#39;vision&#39;" in refused.text
    assert "user:bo@example.com (member of speech)" in refused.text
    assert bo.get("/api/runs/run-vision").status_code == 403
    assert bo.post("/runs/run-vision/cancel").status_code == 403 and source.cancelled == []
    assert "cancel requested" in bo.post("/runs/run-speech/cancel").text and source.cancelled == ["run-speech"]
    assert bo.get("/dead-letters").status_code == 200 and "operators" in bo.get("/dead-letters").text


def test_a_member_of_two_teams_sees_both_an_operator_all_and_an_unknown_caller_none() -> None:
    source = FakeSource(_runs())
    assert _listed(_client(source, "user:ana@example.com")) == {"run-vision", "run-speech"}
    assert _listed(_client(source, "user:ops@example.com")) == {"run-vision", "run-speech", "run-nobody"}
    nobody = _client(source, "")
    assert _listed(nobody) == set() and nobody.get("/runs/run-vision").status_code == 403
    assert "an unidentified caller" in nobody.get("/runs/run-vision").text


def test_without_members_or_operators_everyone_sees_everything() -> None:
    plain = _teams(FILE.replace("operators", "#").replace("members", "#members"))
    c = _client(FakeSource(_runs()), "", plain)
    assert _listed(c) == {"run-vision", "run-speech", "run-nobody"}


def test_the_caller_is_the_chosen_identity_or_the_verified_id_token_cloud_run_checked() -> None:
    signed: dict[str, dict[str, object]] = {
        "good.bo.sig": {"email": "bo@example.com", "email_verified": True},
        "good.sa.sig": {"email": "s@p.iam.gserviceaccount.com"},
        "good.nobody.sig": {"sub": "123"},
    }

    def verify(token: str) -> dict[str, object]:
        if token not in signed:
            raise ValueError("Could not verify token signature.")
        return signed[token]

    assert request_identity({"Authorization": "Bearer good.bo.sig"}, verify) == "user:bo@example.com"
    sa = request_identity({"authorization": "Bearer good.sa.sig"}, verify)
    assert sa == "serviceAccount:s@p.iam.gserviceaccount.com"
    assert request_identity({"Authorization": "Bearer forged.ops.sig"}, verify) == ""  # does not verify: no one
    assert request_identity({"Authorization": "Bearer good.nobody.sig"}, verify) == ""
    assert request_identity({"Authorization": "Basic abc"}, verify) == "" and request_identity({}, verify) == ""
    # Cloud Run checked X-Serverless-Authorization when both come: the identity is that header's
    both = {"X-Serverless-Authorization": "Bearer good.bo.sig", "Authorization": "Bearer good.sa.sig"}
    assert request_identity(both, verify) == "user:bo@example.com"
    source = FakeSource(_runs())
    known = _teams()
    app = create_app(source, frozenset(), hosts=LOOPBACK, access=lambda: known, identity="", verify=verify)
    c = TestClient(app, base_url="http://127.0.0.1:8090")
    answer = c.get("/runs", headers={"Authorization": "Bearer good.bo.sig"}).text
    assert "run-speech" in answer and "run-vision" not in answer
    forged = c.get("/runs", headers={"Authorization": "Bearer forged.ops.sig"}).text
    assert "run-speech" not in forged and "run-vision" not in forged
    assert chosen_identity({"LANDFALL_IDENTITY": " user:ana@example.com "}) == "user:ana@example.com"
    assert chosen_identity({}) == ""
    with pytest.raises(CommandError, match="LANDFALL_IDENTITY: 'ana' is not an IAM principal"):
        chosen_identity({"LANDFALL_IDENTITY": "ana"})
    viewer = viewer_for("user:ana@example.com", _teams())
    assert viewer is not None and viewer.sees("speech") and not viewer.sees(None)


def test_the_clis_read_commands_and_cancel_refuse_another_teams_run(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's user (LANDFALL_IDENTITY here; the gcloud account otherwise) sees their teams' runs only."""
    from pathlib import Path

    from functions import wiring
    from functions.settings import get_settings
    from landfall import access
    from landfall.access import check_visible_doc, cli_viewer, visible_docs

    file = Path(str(tmp_path)) / "teams.toml"
    file.write_text(FILE)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p-1")
    monkeypatch.setenv("LANDFALL_TEAMS_FILE", str(file))
    monkeypatch.setenv("LANDFALL_IDENTITY", "user:bo@example.com")
    monkeypatch.setattr(access, "gcloud_account", lambda: pytest.fail("the chosen identity comes first"))
    get_settings.cache_clear()
    wiring._teams_file.cache_clear()
    try:
        viewer = cli_viewer()
        assert viewer is not None and viewer.teams == ("speech",)
        docs = [r.to_dict() for r in _runs()]
        assert [d["run_id"] for d in visible_docs(docs, viewer)] == ["run-speech"]
        check_visible_doc("run-speech", docs[1], viewer)
        with pytest.raises(
            CommandError, match=r"run run-vision belongs to team 'vision', and you are user:bo@example.com"
        ):
            check_visible_doc("run-vision", docs[0], viewer)
        monkeypatch.delenv("LANDFALL_IDENTITY")
        monkeypatch.setattr(access, "gcloud_account", lambda: "user:ops@example.com")
        operator = cli_viewer()
        assert operator is not None and operator.operator and len(visible_docs(docs, operator)) == 3
    finally:
        get_settings.cache_clear()
        wiring._teams_file.cache_clear()


def test_a_team_name_ends_with_a_letter_or_digit_so_its_account_id_is_valid() -> None:
    from deploy.teams import is_team_name, team_account_id

    assert is_team_name("vision") and is_team_name("v") and is_team_name("ml-2")
    assert not is_team_name("vision-") and not is_team_name("2vision")
    with pytest.raises(TeamsError, match="not ending with '-'"):
        _teams(FILE.replace('name = "speech"', 'name = "speech-"'))
    for name in ("v", "vision", "a" * 40, "a" * 21 + "-" + "b" * 18):
        account = team_account_id(name)
        assert 6 <= len(account) <= 30 and account[0].isalpha() and account[-1].isalnum(), account


def test_the_chosen_identity_makes_the_clis_storage_calls_on_the_local_stack_only() -> None:
    from landfall.access import act_as_chosen_identity

    local = {"LANDFALL_IDENTITY": "user:a@example.com", "STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443"}
    assert act_as_chosen_identity(local) == "user:a@example.com"
    assert local["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:4443/as/user:a@example.com"
    assert act_as_chosen_identity(local) == ""  # once: already acting as it
    cloud = {"LANDFALL_IDENTITY": "user:a@example.com"}
    assert act_as_chosen_identity(cloud) == "" and "STORAGE_EMULATOR_HOST" not in cloud
    nobody = {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443"}
    assert act_as_chosen_identity(nobody) == "" and nobody["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:4443"
