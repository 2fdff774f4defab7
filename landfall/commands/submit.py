"""`landfall submit REQUEST.json`: check a TrainingRequest here, publish it on the requests topic, print its run id.

`landfall submit --script train.py --data gs://BUCKET/PREFIX/` (or `--script DIR`, `--package DIST`, `--image URI`)
builds the request for a team's own code: the script, the folder (packed, landfall/code_folder.py) or the distribution
is uploaded to the code bucket (LANDFALL_CODE_BUCKET) under its content hash, so the same file is one object, and the
request names it (docs/trainer-contract.md)."""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from deploy.teams import code_folder
from landfall.errors import CommandError, client_boundary
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.training_request import TrainingRequest, parse_training_request
from schemas.vocabulary import LAUNCH_MODES, LAUNCH_TERMS, describe

PUBLISH_TIMEOUT_S = 30.0


def load_request(path: str) -> TrainingRequest:
    """The request in `path`, checked as the topic's schema and the dispatcher would; CommandError names the field."""
    from google.protobuf import json_format

    from schemas.proto import message_class

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(
            f"cannot read {path}: {exc.strerror}; pass a TrainingRequest JSON file "
            "(schemas/examples/training_request.json shows every field)"
        ) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): a TrainingRequest is "
            "JSON, which the requests topic takes as UTF-8; save the file as UTF-8 and submit it again"
        ) from exc
    try:
        request = parse_training_request(text)
        json_format.Parse(text, message_class()())
    except SchemaError as exc:
        raise CommandError(f"{path}: {exc}; fix it and submit again (docs/requests.md lists the fields)") from exc
    except json_format.ParseError as exc:
        raise CommandError(f"{path}: the requests topic would refuse it: {' '.join(str(exc).split())}") from exc
    return request


def team_topic(team: str) -> str:
    """The path of team `team`'s own requests topic (the teams file: LANDFALL_TEAMS_FILE, else deploy/teams.toml): a
    team's runs come from there or from ingest (docs/teams.md)."""
    from deploy.teams import TeamsError
    from functions.settings import get_settings
    from functions.wiring import teams

    try:
        known = teams()
    except (TeamsError, ValueError) as exc:
        raise CommandError(f"--team {team}: the teams file cannot be read: {exc}") from exc
    found = known.named(team)
    if found is None:
        names = ", ".join(t.name for t in known.teams) or "none"
        raise CommandError(f"--team {team}: no such team in {known.source or 'the teams file'} (teams: {names})")
    if not found.requests_topic:
        raise CommandError(
            f"--team {team}: the team has no requests topic of its own; give it `requests_topic` in the teams file "
            "(`landfall deploy` creates it), or drop the data under its prefix for ingest to start the run"
        )
    return f"projects/{get_settings().project}/topics/{found.requests_topic}"


def publish(data: bytes, topic: str = "") -> str:
    """Publish a TrainingRequest on `topic` (a full topic path; default the shared requests topic); its message id."""
    from google.api_core.exceptions import NotFound

    from functions.operations import publisher_client
    from functions.settings import get_settings

    with client_boundary("publish the request"):
        topic = topic or get_settings().requests_topic_path
        try:  # as LANDFALL_IDENTITY on the local stack (landfall/access.py), as gcloud's account in a project
            return str(publisher_client().publish(topic, data).result(timeout=PUBLISH_TIMEOUT_S))
        except NotFound as exc:
            raise CommandError(
                f"topic {topic} does not exist: `landfall up` creates it on the local stack, the "
                "deployer in Google Cloud"
            ) from exc


def already_ran(request: TrainingRequest, run: RunRecord) -> str:
    """What to say when the request's run exists: its key names that run, so publishing it again starts nothing."""
    key = request.idempotency_key
    how = (
        "its content is the same as that run's request (no idempotency_key: the key is a hash of the content)"
        if key.startswith("content:")
        else f"its idempotency_key {key!r} is that run's"
    )
    again = (
        f"`landfall retry {run.run_id}` runs it again as a new run"
        if run.state in (RunState.FAILED, RunState.CANCELLED)
        else "to run it again on purpose, give the request an idempotency_key of its own and submit it"
    )
    return (
        f"run {run.run_id} already exists ({run.state}): {how}, so nothing was published; {again}; "
        f"`landfall run {run.run_id}` shows it"
    )


def read_requirements(path: str) -> list[str]:
    """pip requirement lines of a requirements file (comments and blank lines left out)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read --requirements {path}: {exc.strerror}") from exc
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [line for line in lines if line]


def upload_code(path: str, kind: str) -> str:
    """Copy a local file to gs://CODE_BUCKET/KIND/<sha256 prefix>/<name> (KIND may start with a team's folder,
    teams/TEAM/); its URI."""
    local = Path(path)
    try:
        data = local.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    return upload_bytes(data, local.name, kind, path)


def upload_bytes(data: bytes, file_name: str, kind: str, what: str) -> str:
    """Write data to gs://CODE_BUCKET/KIND/<sha256 prefix>/<file_name>; its URI. what: the local thing it came from."""
    from functions.settings import get_settings
    from landfall.uploads import bucket as code_bucket

    bucket = get_settings().code_bucket
    name = f"{kind}/{hashlib.sha256(data).hexdigest()[:16]}/{file_name}"
    with client_boundary(f"upload {what} to the code bucket gs://{bucket}/"):
        held = code_bucket(bucket).get_blob(name)
        # The name is the content's hash: an object already there holds these bytes, and a run planned on it
        # fetches its generation (schemas/code_version.py), which an upload over it would replace.
        if held is None or held.size != len(data):
            code_bucket(bucket).blob(name).upload_from_string(data)
    return f"gs://{bucket}/{name}"


def upload_script(path: str, entry: str | None, folder: str = "") -> str:
    """--script: a file uploaded as it is, or a folder packed with its entry point (landfall/code_folder.py); under
    `folder` (a team's, teams/TEAM/) when given."""
    from landfall.code_folder import DEFAULT_ENTRY, pack_folder

    if not Path(path).is_dir():
        if entry is not None:
            raise CommandError(f"--entry goes with --script DIR (a folder); {path} is a file, which is its own entry")
        return upload_code(path, f"{folder}scripts")
    packed = pack_folder(Path(path), entry or DEFAULT_ENTRY)
    what = f"{path} ({packed.files} files, entry {packed.entry})"
    return upload_bytes(packed.data, packed.name, f"{folder}scripts", what)


def code_request(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainingRequest for --script / --package / --image, with the code uploaded where it must be."""
    if not args.data:
        raise CommandError("--data gs://BUCKET/PREFIX/ is required with --script, --package or --image")
    trainer: dict[str, Any] = {"args": list(args.arg), "launch": args.launch}
    # A team's code goes to the team's folder, where its members may create objects (deploy/gcp/team_access.py).
    folder = code_folder(args.team) if getattr(args, "team", None) else ""
    if args.script:
        trainer["script"] = upload_script(args.script, args.entry, folder)
    elif args.package:
        if not args.module:
            raise CommandError("--package needs --module, the module to run (python -m MODULE)")
        trainer |= {"package_uris": [upload_code(args.package, f"{folder}packages")], "python_module": args.module}
    else:
        trainer["image_uri"] = args.image
        if args.image_command:
            trainer["command"] = list(args.image_command)
    if args.requirements:
        trainer["requirements"] = read_requirements(args.requirements)
    if args.env:
        trainer["env"] = dict(kv.split("=", 1) for kv in args.env)
    request: dict[str, Any] = {
        "idempotency_key": args.key or f"submit:{time.time_ns()}",
        "dataset": {"uri": args.data},
        "trainer": trainer,
        "hyperparameters": {"batch_size": args.batch_size},
    }
    workload = {
        k: v
        for k, v in (
            ("parameters", args.params),
            ("memory_gib_per_gpu", args.memory_gib),
            ("step_seconds", args.step_seconds),
            ("samples_per_epoch", args.samples),
            ("flops_per_sample", args.flops_per_sample),
            ("activation_gib_per_sample", args.activation_gib),
            ("trainable_parameters", args.trainable_params),
        )
        if v
    }
    if workload:
        request["workload"] = workload
    if args.preset:
        request["model"] = {"preset": args.preset}
    pins = {
        k: v
        for k, v in (
            ("machine_type", args.machine_type),
            ("accelerator_count", args.gpus),
            ("replica_count", args.nodes),
        )
        if v
    }
    if args.prefer:
        pins["prefer"] = args.prefer
    if pins:
        request["constraints"] = pins
    return request


def cmd_submit(args: argparse.Namespace) -> int:
    from landfall.queries.runs import read_run_document

    forms = [f for f in ("script", "package", "image") if getattr(args, f)]
    if bool(args.request) == bool(forms) or len(forms) > 1:
        raise CommandError(
            "give a REQUEST.json, or exactly one of --script FILE, --package DIST, --image URI (with --data)"
        )
    topic = team_topic(args.team) if args.team else ""  # an unknown team is refused before anything is uploaded
    if forms:
        data = json.dumps(code_request(args)).encode()
        try:
            request = parse_training_request(data)
        except SchemaError as exc:
            raise CommandError(f"the request would be refused: {exc}") from exc
        message_id = publish(data, topic)
        return _report(args, request, message_id, forms[0])
    request = load_request(args.request)
    existing = read_run_document(request.run_id)
    if existing is not None:
        try:
            run = parse_run_record(existing)
        except SchemaError as exc:
            raise CommandError(
                f"run {request.run_id} already exists but does not fit the run record schema ({exc}); nothing "
                f"was published; `landfall run {request.run_id} --json` shows it as stored"
            ) from exc
        if args.json:
            print(
                json.dumps(
                    {
                        "run_id": run.run_id,
                        "idempotency_key": request.idempotency_key,
                        "message_id": None,
                        "already_exists": True,
                        "state": str(run.state),
                    },
                    indent=2,
                )
            )
        else:
            print(already_ran(request, run))
        return 0
    message_id = publish(Path(args.request).read_bytes(), topic)
    return _report(args, request, message_id, args.request)


def _report(args: argparse.Namespace, request: TrainingRequest, message_id: str, what: str) -> int:
    result: dict[str, Any] = {
        "run_id": request.run_id,
        "idempotency_key": request.idempotency_key,
        "message_id": message_id,
        "already_exists": False,
        "state": None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"published {what} (message {message_id}); its run will be {request.run_id}: "
            f"`landfall watch {request.run_id}` follows it"
        )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "submit",
        help="publish a TrainingRequest (a JSON file, or your own --script/--package/--image), print its run id",
        description="Checks REQUEST.json here (the bad field is named), publishes it on the requests "
        "topic, and prints the id of the run it will start. Only dataset.uri, task and "
        "model.preset are required. A request whose run already exists (the same content, or the same "
        "idempotency_key) is not published again: the command names the run, its state and how to run "
        "it again on purpose.",
    )
    p.add_argument("request", metavar="REQUEST.json", nargs="?", help="a TrainingRequest as JSON")
    code = p.add_argument_group("your own training code (instead of REQUEST.json; docs/trainer-contract.md)")
    code.add_argument(
        "--script",
        metavar="FILE|DIR",
        help="a Python file, or a folder whose entry point (--entry) imports its sibling modules: uploaded to the "
        "code bucket and run (docs/trainer-contract.md, 'A folder of code')",
    )
    code.add_argument(
        "--entry",
        metavar="NAME",
        help="with --script DIR: the file that runs, a path inside the folder (default main.py)",
    )
    code.add_argument("--package", metavar="DIST", help="an sdist or wheel: uploaded and installed, then --module runs")
    code.add_argument("--module", metavar="MODULE", help="with --package: the module to run (python -m MODULE)")
    code.add_argument("--image", metavar="URI", help="a container image from an allowed registry prefix")
    code.add_argument(
        "--command",
        dest="image_command",  # not `command`: the CLI's subcommand is args.command
        nargs="+",
        metavar="WORD",
        help="with --image: the command replacing ENTRYPOINT",
    )
    code.add_argument("--data", metavar="gs://BUCKET/PREFIX/", help="the dataset the code trains on")
    code.add_argument("--requirements", metavar="FILE", help="a requirements.txt installed before the code runs")
    code.add_argument("--arg", action="append", default=[], metavar="A", help="an argument for the code (repeat)")
    code.add_argument("--env", action="append", default=[], metavar="K=V", help="an environment variable (repeat)")
    code.add_argument("--launch", choices=LAUNCH_MODES, default=LAUNCH_MODES[0], help=describe(LAUNCH_TERMS))
    code.add_argument("--key", help="idempotency key (default: a new one per submit, so each submit is a new run)")
    code.add_argument("--batch-size", type=int, default=64, help="global batch size the plan splits (default 64)")
    size = p.add_argument_group("how big the work is (one of these, for the planner)")
    size.add_argument("--preset", help="a model preset whose shape the code has, e.g. gpt-124m")
    size.add_argument("--params", type=int, help="the model's parameter count")
    size.add_argument("--samples", type=int, help="samples per epoch, when the dataset's size does not say it")
    size.add_argument("--memory-gib", type=float, help="measured GiB per GPU (time modelled without --step-seconds)")
    size.add_argument("--step-seconds", type=float, help="measured seconds per step of the global batch on one GPU")
    size.add_argument(
        "--flops-per-sample", type=float, help="training FLOPs of one sample, forward and backward (CNN, ViT, ...)"
    )
    size.add_argument("--activation-gib", type=float, help="activation GiB of one sample at the run's precision")
    size.add_argument("--trainable-params", type=int, help="parameters that train (adapters, LoRA); the rest frozen")
    size.add_argument("--machine-type", help="pin the machine type (with --gpus and --nodes)")
    size.add_argument("--gpus", type=int, help="pin GPUs per machine")
    size.add_argument("--nodes", type=int, help="pin the number of machines")
    code.add_argument(
        "--prefer",
        metavar="OBJECTIVE",
        help="constraints.prefer: cheapest, fastest, or a value of time in dollars per hour (e.g. 25); "
        "default $50/h (docs/planning.md: how the objective is chosen)",
    )
    p.add_argument(
        "--team",
        metavar="NAME",
        help="publish on the team's own requests topic (the teams file's requests_topic): a run on a team's data is "
        "charged to the team only from there or from ingest; on the shared topic it is REJECTED team-caller",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print run_id, idempotency_key, message_id, already_exists and state as JSON",
    )
    p.set_defaults(func=cmd_submit)
