"""Two teams on the enforcing local stack: each team's code runs as the team's own trainer identity, so team A's
script reads its own data and writes its own model (SUCCEEDED), and its tries at team B's data or runs (list, read,
plant a marker, write a model) end FAILED with Cloud Storage's 403 in its log and in the run's error, naming the
permission refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack

from .test_chain import landfall, terminal_run
from .test_user_code import submit

SCRIPT = Path(__file__).with_name("nosy_script.py")
TEAM_A, TEAM_B = "e2e-iso-a", "e2e-iso-b"
REFUSED = {
    "list-other": "storage.objects.list",
    "read-other": "storage.objects.get",
    "write-other-data": "storage.objects.create",
    "write-other-model": "storage.objects.create",
}


def test_a_teams_code_reaches_its_own_data_and_runs_only(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANDFALL_STATE_DIR", str(local_stack.state_dir))  # where `landfall logs` finds the replicas'
    for team in ("a", "b"):
        rows = "".join(f"{i},{i % 3}\n" for i in range(40))
        landing_bucket.blob(f"own-image/iso-{team}/part-0.csv").upload_from_string("x,y\n" + rows)
    other = f"gs://{landing_bucket.name}/own-image/iso-b/"
    runs = {
        attempt: submit(
            capsys,
            *("--team", TEAM_A, "--script", str(SCRIPT), "--data", f"gs://{landing_bucket.name}/own-image/iso-a/"),
            *("--params", "10", "--arg=--try", f"--arg={attempt}", "--arg=--other", f"--arg={other}"),
            *("--arg=--other-team", f"--arg={TEAM_B}"),
        )
        for attempt in ("own", *REFUSED)
    }
    own = terminal_run(firestore_runs, runs["own"], timeout_s=300)
    assert own["state"] == "SUCCEEDED", own.get("error")
    assert f"/runs/{TEAM_A}/{runs['own']}/" in own["artifacts"]["model_dir"]
    model = own["artifacts"]["model_dir"].removeprefix(f"gs://{artifacts_bucket.name}/") + "model.txt"
    assert artifacts_bucket.blob(model).download_as_bytes() == b"rows read: 41\n"
    account = f"lf-team-{TEAM_A}@{local_stack.env['GOOGLE_CLOUD_PROJECT']}.iam.gserviceaccount.com"
    for attempt, permission in REFUSED.items():
        doc = terminal_run(firestore_runs, runs[attempt], timeout_s=300)
        assert doc["state"] == "FAILED", (attempt, doc.get("error"))
        refusal = f"{account} does not have {permission} access to the Google Cloud Storage"
        assert "403" in doc["error"]["message"] and refusal in doc["error"]["message"], (attempt, doc["error"])
        code, out, _ = landfall(capsys, "logs", runs[attempt])
        assert code == 0 and refusal in out and f"Permission '{permission}' denied" in out, (attempt, out[-2000:])
    assert not list(landing_bucket.client.list_blobs(landing_bucket, prefix="own-image/iso-b/planted/"))
    assert not list(artifacts_bucket.client.list_blobs(artifacts_bucket, prefix=f"runs/{TEAM_B}/planted/"))
