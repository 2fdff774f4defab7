"""Command line: `python -m deploy.vertex_emulator --host 127.0.0.1 --port PORT --project PROJECT
--events-topic TOPIC --state-dir DIR [--faults FILE] [--images FILE] [--tls-cert PEM --tls-key PEM]`.

Parses flags, starts the server, prints "Vertex emulator listening on HOST:PORT" once it serves, and on
SIGTERM or SIGINT stops every replica process before exiting.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHUTDOWN_REPORT_SECONDS = 20
SIGNAL_POLL_SECONDS = 0.2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.vertex_emulator",
        description="Serve Vertex AI's JobService (custom jobs, replicas run as local processes) and ModelService "
        "(Model Registry) locally.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default 0)")
    parser.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT"),
        help="project of the events topic and CLOUD_ML_PROJECT_ID fallback (default: $GOOGLE_CLOUD_PROJECT)",
    )
    parser.add_argument(
        "--events-topic",
        help="Pub/Sub topic (on PUBSUB_EMULATOR_HOST) receiving job log entries; leave out to publish nothing",
    )
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="folder for the job table, replica logs and models"
    )
    parser.add_argument("--faults", type=Path, help="JSON or TOML fault plan (see docs/vertex_emulator.md)")
    parser.add_argument(
        "--images", type=Path, help="JSON file mapping container image URIs to a local entrypoint (a list of words)"
    )
    parser.add_argument(
        "--cwd", type=Path, default=REPO_ROOT, help="working directory of replicas (default: the repository root)"
    )
    parser.add_argument(
        "--max-nproc-per-node",
        type=int,
        help="cap on LANDFALL_NPROC_PER_NODE (local processes per node standing in for GPUs); default: no cap",
    )
    parser.add_argument(
        "--stop-grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL when stopping replicas"
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        help="PEM certificate (chain) to also serve TLS on a second, free port, for clients that only speak TLS "
        "such as aiplatform.init(api_endpoint=...); needs --tls-key",
    )
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument(
        "--iam",
        default="",
        help="the local stack's IAM (its storage gate, http://HOST:PORT): every JobService and ModelService call, "
        "and acting as a job's service account, are checked against the deploy's grants for the caller a call names",
    )
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together: give both (PEM files) or neither")
    if args.max_nproc_per_node is not None and args.max_nproc_per_node < 1:
        parser.error(f"--max-nproc-per-node must be at least 1, found {args.max_nproc_per_node}")
    if not args.project:
        parser.error("--project is required (or set GOOGLE_CLOUD_PROJECT), e.g. --project landfall-local")
    if args.events_topic and not os.environ.get("PUBSUB_EMULATOR_HOST"):
        parser.error(
            f"--events-topic {args.events_topic} needs the Pub/Sub emulator, but PUBSUB_EMULATOR_HOST is not set. "
            "Start the Pub/Sub emulator and export PUBSUB_EMULATOR_HOST=HOST:PORT, or leave out --events-topic."
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from deploy.vertex_emulator.config import ConfigError, load_images
    from deploy.vertex_emulator.faults import FaultPlan
    from deploy.vertex_emulator.models import ModelService
    from deploy.vertex_emulator.runner import RunnerSettings
    from deploy.vertex_emulator.server import EmulatorConfig, JobService, add_tls_port, build_server

    try:
        images = load_images(args.images) if args.images else {}
        faults = FaultPlan(args.faults)
    except ConfigError as error:
        print(f"vertex emulator: {error}", file=sys.stderr)
        return 2
    config = EmulatorConfig(
        project=args.project,
        state_dir=args.state_dir,
        events_topic=args.events_topic,
        runner=RunnerSettings(
            cwd=args.cwd, images=images, stop_grace_seconds=args.stop_grace, max_nproc_per_node=args.max_nproc_per_node
        ),
        faults=faults,
        iam=args.iam,
    )
    service = JobService(config)
    try:
        server, port = build_server(service, args.host, args.port, models=ModelService(args.state_dir))
        if args.tls_cert is not None:
            tls_port = add_tls_port(server, args.host, args.tls_cert.read_bytes(), args.tls_key.read_bytes())
            print(f"Vertex emulator listening with TLS on {args.host}:{tls_port}", flush=True)
    except OSError as error:
        print(f"vertex emulator: {error}", file=sys.stderr)
        service.shutdown()
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(f"Vertex emulator listening on {args.host}:{port}", flush=True)
    # Wake up now and then: a signal delivered to one of gRPC's threads only runs its Python handler once the main
    # thread executes bytecode again, so a plain wait() could sleep through SIGTERM.
    while not stop.wait(timeout=SIGNAL_POLL_SECONDS):
        pass
    print("Vertex emulator stopping: ending every replica process", flush=True)
    faulthandler.dump_traceback_later(SHUTDOWN_REPORT_SECONDS)  # shows where a slow shutdown is stuck
    server.stop(grace=1)
    service.shutdown()
    faulthandler.cancel_dump_traceback_later()
    print("Vertex emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
