"""`landfall demo`: the main job end to end. Drop a dataset in the landing bucket, follow the run to its end."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from schemas.run_record import TERMINAL_STATES, RunRecord, RunState, parse_run_record
from schemas.training_request import run_id_for


def upload_dataset(bucket_name: str, prefix: str, shards: list[str]) -> int:
    """Upload the shards, then `_SUCCESS`; returns the marker's generation (which names this dataset version)."""
    from landfall.uploads import local_bucket

    bucket = local_bucket(bucket_name)
    for i, text in enumerate(shards):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return int(marker.generation)


def follow(run_id: str, timeout_s: float, quiet: bool) -> RunRecord | None:
    """Poll the run record until it is terminal, printing each state as it is reached."""
    from landfall.queries.runs import run_reader

    read = run_reader(run_id)
    start = time.monotonic()
    seen: str | None = None
    while time.monotonic() - start < timeout_s:
        doc = read()
        record = parse_run_record(doc) if doc is not None else None
        state = record.state.value if record else "waiting for the dispatcher"
        if state != seen and not quiet:
            print(f"  [{time.monotonic() - start:6.1f}s] {state}", flush=True)
            seen = state
        if record and record.state in TERMINAL_STATES:
            return record
        time.sleep(0.5)
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    from deploy.local import stack
    from deploy.local.processes import StackError
    from landfall.commands.runs import describe
    from landfall.stack_env import load_stack_env
    from landfall.synthetic import demo_csv_shards

    began = time.monotonic()
    if not args.quiet:
        print("starting the local stack (if it is not up)...", flush=True)
    try:
        info = stack.up(ports="free" if args.free_ports else None)
    except StackError as exc:
        print(f"landfall demo: {exc}", file=sys.stderr)
        return 1
    load_stack_env(info.state_dir)
    bucket = info.env["LANDFALL_LANDING_BUCKET"]
    from functions.settings import get_settings

    prefix = f"{get_settings().dataset_prefix}demo-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S-%f')}/"
    shards = demo_csv_shards(shards=args.shards, rows_per_shard=args.rows)
    generation = upload_dataset(bucket, prefix, shards)
    run_id = run_id_for(f"gcs:{bucket}/{prefix}:{generation}")
    if not args.quiet:
        print(
            f"uploaded {len(shards)} shards and _SUCCESS to gs://{bucket}/{prefix}; following run {run_id}", flush=True
        )
    record = follow(run_id, args.timeout, args.quiet)
    if record is None:
        print(
            f"landfall demo: run {run_id} did not finish within {args.timeout:.0f}s; `landfall run {run_id}` "
            f"shows where it is, logs are in {info.state_dir / 'logs'}",
            file=sys.stderr,
        )
        return 1
    print(describe(record))
    print(f"demo wall time: {time.monotonic() - began:.1f}s")
    if record.state != RunState.SUCCEEDED:
        reason = record.error.message if record.error else "no reason recorded"
        print(f"landfall demo: run ended {record.state.value}: {reason}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the main job end to end on the local stack (drop data -> SUCCEEDED)")
    p.add_argument("--shards", type=int, default=4, help="CSV shards to upload (default 4)")
    p.add_argument("--rows", type=int, default=250, help="rows per shard (default 250)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the run to end (default 600)")
    p.add_argument("--quiet", action="store_true", help="print only the final record")
    p.add_argument(
        "--free-ports",
        action="store_true",
        help="start the stack (if it is not up) on free ports; LANDFALL_PORTS=free, or `make demo PORTS=free`, "
        "does the same",
    )
    p.set_defaults(func=cmd_demo)
