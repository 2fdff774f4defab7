"""The trainer image's launcher running a team's own script on this machine, as a Vertex replica would: fetched,
installed, given the contract's variables, run torchrun style, its metrics and model kept, its failures classified."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemas.trainer_failure import parse_trainer_failure
from schemas.vocabulary import REASON_FOR_TRAINER_KIND
from tests.trainer_runner import REPO, trainer_env

EXAMPLES = REPO / "examples"


def dataset(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{2 * i + 1}\n" for i in range(40)))
    (data / "_SUCCESS").write_text("")
    return data


def launch(
    tmp_path: Path, script: Path | str, *args: str, nproc: int = 1, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = trainer_env(
        LANDFALL_TRAINER_FORM="script",
        LANDFALL_TRAINER_SCRIPT=str(script),
        LANDFALL_DATA_URI=str(dataset(tmp_path)) + "/",
        AIP_MODEL_DIR=str(tmp_path / "out" / "model") + "/",
        LANDFALL_NPROC_PER_NODE=str(nproc),
        LANDFALL_CODE_ENV_CACHE=str(tmp_path / "envs"),
        LANDFALL_WORK_DIR=str(tmp_path),
        **extra,
    )
    return subprocess.run(
        [sys.executable, "-m", "trainer.launcher", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def reason(tmp_path: Path) -> tuple[str, str]:
    failure = parse_trainer_failure((tmp_path / "out" / "model" / "failure.json").read_text())
    return REASON_FOR_TRAINER_KIND.get(failure.kind, "user-code"), failure.message


def test_a_torchrun_script_trains_on_two_processes_and_leaves_model_and_metrics(tmp_path: Path) -> None:
    done = launch(tmp_path, EXAMPLES / "ddp_script" / "train.py", "--epochs", "4", nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    model = tmp_path / "out" / "model"
    assert (model / "model.pt").stat().st_size > 0
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["trainer"] == "script" and metrics["world_size"] == 2 and metrics["steps"] == 4
    assert [p["step"] for p in metrics["loss_curve"]] == [1, 2, 3, 4]
    assert metrics["final"]["world_size"] == 2 and metrics["final"]["loss"] == metrics["loss_curve"][-1]["loss"]
    listing = [
        json.loads(line)
        for line in (tmp_path / next(tmp_path.glob("landfall-node-*")).name / "data-files.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [(o["name"], o["size"]) for o in listing] == [
        ("part-0.csv", (tmp_path / "data" / "part-0.csv").stat().st_size)
    ]


@pytest.mark.parametrize(
    ("script", "expected", "line"),
    [
        ("exhaust_memory.py", "out-of-memory", "CUDA out of memory"),
        ("exit_one.py", "user-code", "loss went to nan"),
        ("missing_module.py", "bad-config", "No module named 'landfall_example_package_that_does_not_exist'"),
    ],
)
def test_a_failing_script_ends_with_its_classified_reason_and_the_line_a_user_needs(
    tmp_path: Path, script: str, expected: str, line: str
) -> None:
    done = launch(tmp_path, EXAMPLES / "failing" / script)
    assert done.returncode != 0
    got, message = reason(tmp_path)
    assert got == expected and line in message, message
    assert line in done.stderr  # passed through to the replica's log as well


def test_a_requirement_that_cannot_be_installed_is_bad_config_naming_it(tmp_path: Path) -> None:
    done = launch(
        tmp_path,
        EXAMPLES / "failing" / "exit_one.py",
        LANDFALL_TRAINER_REQUIREMENTS=json.dumps(["landfall-no-such-package-anywhere==9.9.9"]),
        UV_OFFLINE="1",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    got, message = reason(tmp_path)
    assert got == "bad-config" and "landfall-no-such-package-anywhere" in message, message


RESUMING_SCRIPT = """
import json, os, pathlib, sys
folder = pathlib.Path(os.environ["LANDFALL_CHECKPOINT_DIR"])
state = folder / "state.json"
step = json.loads(state.read_text())["step"] if state.exists() else 0
step += 1
state.write_text(json.dumps({"step": step}))
(folder / f"attempt-{step}.txt").write_text(str(folder))
if step == 1:
    print("first attempt: failing after its checkpoint", file=sys.stderr)
    sys.exit(1)
pathlib.Path(os.environ["LANDFALL_MODEL_DIR"], "model.pt").write_text(f"resumed at {step}")
"""


def test_a_failed_attempt_s_checkpoints_reach_aip_checkpoint_dir_and_the_next_attempt_resumes_from_them(
    tmp_path: Path,
) -> None:
    script = tmp_path / "resume.py"
    script.write_text(RESUMING_SCRIPT)
    checkpoints = tmp_path / "out" / "checkpoints"
    for attempt in ("one", "two"):
        (tmp_path / attempt).mkdir()
    first = launch(tmp_path / "one", script, AIP_CHECKPOINT_DIR=f"{checkpoints}/")
    assert first.returncode != 0 and "failing after its checkpoint" in first.stderr
    assert json.loads((checkpoints / "state.json").read_text()) == {"step": 1}
    local = Path((checkpoints / "attempt-1.txt").read_text())  # LANDFALL_CHECKPOINT_DIR: a folder of the node's own
    assert local.is_relative_to(tmp_path / "one") and local != checkpoints
    kept = (checkpoints / "attempt-1.txt").stat().st_mtime_ns

    second = launch(tmp_path / "two", script, AIP_CHECKPOINT_DIR=f"{checkpoints}/")
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((checkpoints / "state.json").read_text()) == {"step": 2}
    assert (tmp_path / "two" / "out" / "model" / "model.pt").read_text() == "resumed at 2"
    assert (checkpoints / "attempt-2.txt").exists()
    assert (checkpoints / "attempt-1.txt").stat().st_mtime_ns == kept  # restored and unchanged: not copied back


def test_checkpoints_in_a_bucket_are_restored_and_copied_back_through_cloud_storage(
    tmp_path: Path, gcs_emulator: object
) -> None:
    """The same, with AIP_CHECKPOINT_DIR a gs:// folder on fake-gcs-server, as the Vertex emulator sets it."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(credentials=AnonymousCredentials()).create_bucket(f"runs-{uuid.uuid4().hex[:8]}")
    script = tmp_path / "resume.py"
    script.write_text(RESUMING_SCRIPT)
    folder = f"gs://{bucket.name}/runs/r1/checkpoints/"
    for attempt in ("one", "two"):
        (tmp_path / attempt).mkdir()
    first = launch(tmp_path / "one", script, AIP_CHECKPOINT_DIR=folder)
    assert first.returncode != 0 and "failing after its checkpoint" in first.stderr
    kept = bucket.get_blob("runs/r1/checkpoints/attempt-1.txt").generation
    second = launch(tmp_path / "two", script, AIP_CHECKPOINT_DIR=folder)
    assert second.returncode == 0, second.stderr[-3000:]
    names = sorted(b.name for b in bucket.list_blobs(prefix="runs/r1/checkpoints/"))
    assert names == [f"runs/r1/checkpoints/{n}" for n in ("attempt-1.txt", "attempt-2.txt", "state.json")]
    assert json.loads(bucket.blob("runs/r1/checkpoints/state.json").download_as_text()) == {"step": 2}
    assert bucket.get_blob("runs/r1/checkpoints/attempt-1.txt").generation == kept  # not written again


def test_a_folder_submitted_as_a_script_runs_its_entry_which_imports_its_sibling_module(
    tmp_path: Path, gcs_emulator: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`landfall submit --script DIR`'s packing and upload (to the code bucket on fake-gcs-server), then the launcher
    fetching the archive as it fetches a script and running it on two processes: main.py imports tabular.py and reads
    settings.json beside it, and the node's processes share one unpacked copy."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from functions.gcp import clients
    from functions.settings import get_settings
    from landfall.commands.submit import upload_script

    bucket = storage.Client(credentials=AnonymousCredentials()).create_bucket(f"code-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("LANDFALL_CODE_BUCKET", bucket.name)
    get_settings.cache_clear()
    clients.storage_client.cache_clear()
    try:
        uri = upload_script(str(EXAMPLES / "ddp_folder"), None)
    finally:
        get_settings.cache_clear()
        clients.storage_client.cache_clear()
    assert uri.startswith(f"gs://{bucket.name}/scripts/") and uri.endswith("/ddp_folder.pyz")

    done = launch(tmp_path, uri, "--epochs", "3", nproc=2)  # LANDFALL_TRAINER_SCRIPT: the gs:// URI
    assert done.returncode == 0, done.stderr[-3000:]
    model = tmp_path / "out" / "model"
    assert (model / "model.pt").stat().st_size > 0
    metrics = json.loads((model / "metrics.json").read_text())
    assert (metrics["trainer"], metrics["world_size"], metrics["steps"]) == ("script", 2, 3)
    (node,) = tmp_path.glob("landfall-node-*")
    copies = [p for p in (node / "code").iterdir() if p.is_dir()]
    assert [p.name.rsplit("-", 1)[0] for p in copies] == ["ddp_folder"]  # one unpacked copy for both processes
    assert (copies[0] / "tabular.py").read_bytes() == (EXAMPLES / "ddp_folder" / "tabular.py").read_bytes()


def test_an_image_s_checkpoints_go_through_the_emulator_s_stand_in_for_the_mount(tmp_path: Path) -> None:
    """python -m trainer.gcs_stand_in (what the Vertex emulator wraps an image's command with): the command's
    LANDFALL_CHECKPOINT_DIR starts with what AIP_CHECKPOINT_DIR holds, and what it saves there reaches
    AIP_CHECKPOINT_DIR even when it fails."""
    checkpoints = tmp_path / "out" / "checkpoints"
    save = (
        "import os, pathlib, sys; d = pathlib.Path(os.environ['LANDFALL_CHECKPOINT_DIR']); "
        "n = len(list(d.glob('step-*'))); (d / f'step-{n + 1}').write_text(str(d)); sys.exit(3 if n == 0 else 0)"
    )
    codes = []
    for attempt in ("one", "two"):
        (tmp_path / attempt).mkdir()
        env = trainer_env(
            LANDFALL_DATA_URI=str(dataset(tmp_path / attempt)) + "/",
            AIP_MODEL_DIR=str(tmp_path / "out" / "model") + "/",
            AIP_CHECKPOINT_DIR=f"{checkpoints}/",
            LANDFALL_WORK_DIR=str(tmp_path / attempt),
        )
        done = subprocess.run(
            [sys.executable, "-m", "trainer.gcs_stand_in", "--", sys.executable, "-c", save],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        codes.append(done.returncode)
    assert codes == [3, 0]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-1", "step-2"]
    assert Path((checkpoints / "step-2").read_text()).is_relative_to(tmp_path / "two")  # a local folder of its own


def test_a_folder_s_module_named_like_a_standard_one_does_not_replace_it_while_the_archive_unpacks(
    tmp_path: Path,
) -> None:
    """The archive's own __main__ imports zipfile and tempfile to unpack: a team's zipfile.py beside main.py (which
    main.py never imports) must not be what it gets."""
    from landfall.code_folder import pack_folder

    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "zipfile.py").write_text("raise ImportError('the team zipfile.py was imported')\n")
    (folder / "tempfile.py").write_text("raise ImportError('the team tempfile.py was imported')\n")
    (folder / "helper.py").write_text("GREETING = 'from the sibling'\n")
    (folder / "main.py").write_text(
        "import os, pathlib, sys\nfrom helper import GREETING\n"
        "said = pathlib.Path(os.environ['LANDFALL_MODEL_DIR'], 'said.txt')\n"
        "said.write_text(GREETING + ' ' + ' '.join(sys.argv[1:]))\n"
    )
    archive = tmp_path / "code.pyz"
    archive.write_bytes(pack_folder(folder).data)
    (tmp_path / "run").mkdir()
    done = launch(tmp_path / "run", archive, "--flag", "x")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "out" / "model" / "said.txt").read_text() == "from the sibling --flag x"


def test_a_cuda_only_script_stops_without_cuda_and_runs_unchanged_under_the_cpu_rehearsal(tmp_path: Path) -> None:
    script = EXAMPLES / "cuda_only_script" / "train.py"
    (tmp_path / "plain").mkdir()
    (tmp_path / "rehearsed").mkdir()
    plain = launch(tmp_path / "plain", script, nproc=2)
    assert plain.returncode != 0
    assert "NCCL" in (tmp_path / "plain" / "out" / "model" / "failure.json").read_text()

    rehearsed = launch(tmp_path / "rehearsed", script, "--epochs", "3", nproc=2, LANDFALL_CPU_REHEARSAL="1")
    assert rehearsed.returncode == 0, rehearsed.stderr[-3000:]
    assert "LANDFALL_CPU_REHEARSAL=1: CUDA devices run on the CPU" in rehearsed.stderr
    model = tmp_path / "rehearsed" / "out" / "model"
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and [p["step"] for p in metrics["loss_curve"]] == [1, 2, 3]
    assert (model / "model.pt").stat().st_size > 0


def test_the_rehearsal_site_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    from trainer.cpu_rehearsal import SITE_FOLDER

    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = '1'\n")
    env = trainer_env(PYTHONPATH=f"{SITE_FOLDER}:{other}", LANDFALL_CPU_REHEARSAL="1")
    code = (
        "import os, torch; "
        "print(os.environ.get('SHADOWED_RAN'), torch.ones(1).to(0).device, torch.zeros(1, device='cuda:1').device)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "cpu", "cpu"]


def test_a_script_finds_the_champion_as_a_local_folder_like_its_model_s(tmp_path: Path, gcs_emulator: Any) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    from tests.conftest import PROJECT

    bucket = gcs.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(
        f"champion-{uuid.uuid4().hex[:8]}"
    )
    bucket.blob("runs/r0/model/model.json").upload_from_string('{"weights": [1, 2]}')
    bucket.blob("runs/r0/model/sub/config.json").upload_from_string("{}")
    script = tmp_path / "score.py"
    script.write_text(
        "import json, os, pathlib\n"
        "where = pathlib.Path(os.environ['LANDFALL_CHAMPION_MODEL_DIR'])\n"
        "files = sorted(str(p.relative_to(where)) for p in where.rglob('*') if p.is_file())\n"
        "line = {'step': 1, 'loss': 0.5, 'local': where.is_dir(), 'files': len(files)}\n"
        "open(os.environ['LANDFALL_METRICS_FILE'], 'a').write(json.dumps(line) + '\\n')\n"
        "assert files == ['model.json', 'sub/config.json'], files\n"
    )
    done = launch(tmp_path, script, LANDFALL_CHAMPION_MODEL_DIR=f"gs://{bucket.name}/runs/r0/model/")
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((tmp_path / "out" / "model" / "metrics.json").read_text())["final"]
    assert final["local"] is True and final["files"] == 2
