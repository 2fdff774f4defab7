"""`landfall drop DIR gs://BUCKET/PREFIX/`: land a folder as a dataset the way a producer would.

It uploads every file of DIR under the prefix (a progress bar over the bytes, silenced by --quiet), then the
`_SUCCESS` marker last (docs/ingest.md: the marker says the dataset is complete now), then waits for ingest to
record the version that marker completed and prints the dataset's status and the run it started. A folder that no
route covers is refused before anything is uploaded, naming the routes' prefixes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy.routes import Route
from landfall.commands.datasets import DatasetUriError, describe_dataset, parse_dataset_uri
from landfall.errors import CommandError, client_boundary
from landfall.queries.datasets import StoredDataset, dataset_reader
from schemas.dataset_layout import MARKER
from schemas.dataset_record import DatasetRecord, DatasetStatus

POLL_S = 1.0
ROUTES_FILE_ENV = "LANDFALL_ROUTES_FILE"
"""The routes file the functions read instead of deploy/routes.toml (functions/settings.py routes_file)."""


def files_to_upload(folder: Path, prefix: str) -> list[tuple[Path, str]]:
    """(local file, object name) for every file under `folder`, in name order; a marker in the folder is left out
    (drop writes it last, once everything else is there)."""
    if not folder.is_dir():
        raise CommandError(f"{str(folder)!r} is not a folder; pass the folder that holds the dataset's files")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)
    if not files:
        raise CommandError(f"{str(folder)!r} holds no files to upload; put the dataset's files in it first")
    return [(p, prefix + p.relative_to(folder).as_posix()) for p in files]


def ingest_routes() -> tuple[Route, ...]:
    """The routes ingest applies: LANDFALL_ROUTES_FILE when set here or given to the local stack's functions (its
    stack record), else the shipped deploy/routes.toml (functions/ingest/routes.py reads the same)."""
    from deploy.local import provision, record
    from deploy.routes import ROUTES_FILE, RouteError, read_routes
    from deploy.topology import PRINCIPAL_PATH

    path, storage = os.environ.get(ROUTES_FILE_ENV, ""), os.environ.get("STORAGE_EMULATOR_HOST")
    if not path and storage:
        current = record.read(provision.default_state_dir())
        # the stack's endpoint, whoever this process calls as (LANDFALL_IDENTITY adds /as/MEMBER)
        if current is not None and current.env.get("STORAGE_EMULATOR_HOST") == storage.partition(PRINCIPAL_PATH)[0]:
            path = current.service_env.get(ROUTES_FILE_ENV, "")
    try:
        return read_routes(Path(path)) if path else read_routes(ROUTES_FILE)
    except (OSError, RouteError) as exc:
        raise CommandError(f"cannot read the routes ingest applies ({path or ROUTES_FILE}): {exc}") from exc


def check_routed(bucket: str, prefix: str, routes: tuple[Route, ...]) -> None:
    """Refuse, before anything is uploaded, a folder no route covers: ingest would ignore its objects."""
    if any(route.matches(bucket, prefix) for route in routes):
        return
    covered = ", ".join(f"gs://{route.bucket}/{route.prefix}" for route in routes)
    raise CommandError(
        f"no route covers gs://{bucket}/{prefix}, so ingest would ignore what lands there; nothing was uploaded. "
        f"Drop it under a routed prefix ({covered}; `*` is any allowed bucket), or add a route (docs/ingest.md)"
    )


def settled(record: DatasetRecord | None, generation: str) -> bool:
    """Whether ingest has recorded the dataset version that the marker of `generation` completed."""
    return (
        record is not None
        and record.version is not None
        and record.version.generation == generation
        and record.status != DatasetStatus.COLLECTING
    )


def upload(bucket: Any, files: list[tuple[Path, str]], *, quiet: bool) -> None:
    from tqdm import tqdm

    with tqdm(
        total=sum(p.stat().st_size for p, _ in files),
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="upload",
        disable=quiet,
        file=sys.stderr,
    ) as bar:
        for path, name in files:
            bar.set_postfix_str(name.rsplit("/", 1)[-1], refresh=False)
            bucket.blob(name).upload_from_filename(str(path))
            bar.update(path.stat().st_size)


def wait_for(
    read: Callable[[], StoredDataset | None],
    generation: str,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> StoredDataset | None:
    """The dataset document once it records the marker's version, or None when `timeout_s` passed first."""
    deadline = clock() + timeout_s
    while True:
        doc = read()
        if settled(None if doc is None else doc.record, generation):
            return doc
        if clock() >= deadline:
            return None
        sleep(POLL_S)


def cmd_drop(args: argparse.Namespace) -> int:
    from landfall.uploads import bucket as landing_bucket

    try:
        bucket_name, prefix = parse_dataset_uri(args.uri)
    except DatasetUriError as exc:
        raise CommandError(str(exc)) from exc
    files = files_to_upload(Path(args.dir), prefix)
    check_routed(bucket_name, prefix, ingest_routes())
    uri = f"gs://{bucket_name}/{prefix}"
    with client_boundary(f"upload to {uri}"):
        bucket = landing_bucket(bucket_name)
        upload(bucket, files, quiet=args.quiet)
        marker = bucket.blob(prefix + MARKER)
        marker.upload_from_string(b"")
    if not args.quiet:
        print(f"uploaded {len(files)} files and {MARKER} to {uri}", file=sys.stderr)
    doc = wait_for(dataset_reader(bucket_name, prefix), str(marker.generation), args.wait)
    if doc is None:
        raise CommandError(
            f"ingest has not recorded {uri} (marker generation {marker.generation}) within "
            f"{args.wait:g}s; `landfall dataset {uri}` shows where it stands, `landfall status` "
            "whether the stack's functions are up"
        )
    record = doc.record
    print(describe_dataset(record, doc.extra))
    if record.status == DatasetStatus.REQUESTED and record.version is not None and record.version.run_id:
        run_id = record.version.run_id
        print(f"run       {run_id} (`landfall watch {run_id}` follows it)")
        return 0
    return 1 if record.status == DatasetStatus.REFUSED else 0


def seconds_argument(text: str) -> float:
    """--wait's type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "drop",
        help="upload a folder as a dataset, then its _SUCCESS marker; print its status and run",
        description="Uploads every file of DIR under gs://BUCKET/PREFIX/ with a progress bar, then "
        "the _SUCCESS marker, waits for ingest to record that version and prints the "
        "dataset's status and the run it started (exit 1 when ingest refused it).",
    )
    p.add_argument("dir", metavar="DIR", help="the local folder holding the dataset's files")
    p.add_argument("uri", metavar="gs://BUCKET/PREFIX/", help="the dataset folder to land it in")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument(
        "--wait",
        type=seconds_argument,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for ingest to record the dataset (default 120)",
    )
    p.set_defaults(func=cmd_drop)
