"""What the functions-framework server itself costs per delivery and at idle: the part of the load test's "CPU ms
per request" (at most 15 ms) that is not the dispatcher's handler.

    .venv/bin/python bench/server_cpu.py [--deliveries 1000] [--idle 30] [--drops 30] [--no-stack]
        [--server-env NAME=VALUE ...] [--out F.json]

1. The server alone. It starts one functions-framework server exactly as the local stack starts a function
   (deploy/local/services.py `function`: the same command, gunicorn settings and environment, a session of its own),
   on the entry points of bench/local_stack/noop_function.py instead of functions/main.py's, and POSTs it
   --deliveries Pub/Sub push bodies one after another, as the delivery bridge does (deploy/local/bridge.py
   `push_body` and `post`: a new connection each, the body Google's push sends) with a TrainingRequest as the
   message (schemas/examples/training_request.json, 1.5 kB). It counts the user + system CPU of the server's
   session (its gunicorn arbiter and worker, /proc, as the load test does), per delivery, for each entry point:
   - `noop`: nothing behind the server (HTTP, Flask, the push body turned into a CloudEvent);
   - `entry`: plus what functions/main.py's dispatch adds around its handler (the message decoded, one log line);
   - `decode`: plus the TrainingRequest parsed, which bench/dispatch_cpu.py's handler figure already holds.
   Then the same server's CPU per second while nothing arrives, over --idle seconds. And the `noop` app called in
   this process straight through WSGI, without HTTP or gunicorn (`time.process_time`): the share of Flask and the
   push-to-CloudEvent conversion in the server's figure. --server-env adds to the server's environment, to try
   the settings functions-framework reads (THREADS, WORKERS: functions_framework/_http/gunicorn.py).
2. The deployed dispatcher (unless --no-stack). On the bench stack (bench/local_stack, the trainer a no-op), after
   one dataset has made its clients: its server's CPU per second over --idle seconds with nothing arriving, then per
   delivery over --drops datasets dropped one at a time, with and without the idle share of that time: the load
   test's measure at a known rate.
It prints what a load-test delivery holds beyond the handler at 0.5, 1 and 1.5 deliveries a second. No target: the
figures are docs/measurements/dispatch-cpu.md's ("The server's share").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from google.pubsub_v1 import PubsubMessage  # noqa: E402

from bench.latency import COLD_ENDED_WITHIN_S, one_drop  # noqa: E402
from bench.local_stack.harness import (  # noqa: E402
    PYTHON_THREAD,
    idle_cpu_ms_per_s,
    noop_stack,
    session_cpu_seconds,
)
from bench.local_stack.load import dispatch_deliveries, dispatcher  # noqa: E402
from bench.local_stack.report import machine  # noqa: E402
from deploy.local import processes, services  # noqa: E402
from deploy.local.bridge import post, push_body  # noqa: E402
from deploy.topology import load_topology  # noqa: E402
from schemas.training_request import parse_training_request  # noqa: E402

TARGETS_SOURCE = REPO / "bench/local_stack/noop_function.py"
TARGETS = ("noop", "entry", "decode")
REQUEST_EXAMPLE = REPO / "schemas/examples/training_request.json"
WARMUP = 20
"""Deliveries before counting: the first ones import what the server loads lazily."""
RATES = (0.5, 1.0, 1.5)
"""Deliveries per second at which the idle share is shown: the load tests' dispatcher ran at 0.5 to 1.5."""


@dataclass(frozen=True)
class ServerFigures:
    target: str
    deliveries: int
    cpu_ms_per_delivery: float
    wall_ms_per_delivery: float
    idle_cpu_ms_per_s: float


def push_bodies(count: int, subscription: str) -> list[dict[str, Any]]:
    """count push bodies as the bridge builds them, each its own message id, the message a TrainingRequest as
    ingest publishes it (compact JSON, the object list and its digest)."""
    data = parse_training_request(REQUEST_EXAMPLE.read_bytes()).to_json()
    published = datetime.now(UTC)
    return [
        push_body(
            PubsubMessage(data=data, message_id=str(17_000_000_000_000_000 + i), publish_time=published),
            subscription,
            1,
        )
        for i in range(count)
    ]


def deliver(url: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        status, why = post(url, body, 30.0)
        if status != 200:
            raise SystemExit(f"{url} answered {status} {why}; expected 200 (acknowledged)")


def in_process_ms(bodies: list[dict[str, Any]]) -> float:
    """CPU ms per delivery of the `noop` app called straight through WSGI in this process: no socket, no HTTP
    parsing, no gunicorn; what is left is Flask, functions-framework's execution id and the push body turned into a
    CloudEvent."""
    import functions_framework
    from werkzeug.test import EnvironBuilder

    app = functions_framework.create_app("noop", str(TARGETS_SOURCE), "cloudevent")
    environs = [
        EnvironBuilder(path="/", method="POST", json=body).get_environ()  # Content-Type: application/json
        for body in bodies
    ]
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)

    for environ in environs[:WARMUP]:
        b"".join(app(environ, start_response))
    start = time.process_time()
    for environ in environs[WARMUP:]:
        b"".join(app(environ, start_response))
    elapsed = time.process_time() - start
    if any(not status.startswith("200") for status in statuses):
        raise SystemExit(f"the noop app answered {sorted(set(statuses))}; expected 200 OK")
    return 1000 * elapsed / (len(environs) - WARMUP)


def measure_server(
    target: str, bodies: list[dict[str, Any]], log_dir: Path, idle_s: float, env: dict[str, str]
) -> ServerFigures:
    port = processes.free_port()
    spec = services.function(target, port, env, source=TARGETS_SOURCE)
    server = processes.start(spec, log_dir)
    url = f"http://{services.HOST}:{port}/"
    try:
        deliver(url, bodies[:WARMUP])
        counted = bodies[WARMUP:]
        start_cpu, start = session_cpu_seconds(server.pid), time.monotonic()
        deliver(url, counted)
        cpu_s, wall_s = session_cpu_seconds(server.pid) - start_cpu, time.monotonic() - start
        idle = sum(idle_cpu_ms_per_s(server.pid, idle_s).values())
    finally:
        processes.stop(server)
    n = len(counted)
    return ServerFigures(target, n, 1000 * cpu_s / n, 1000 * wall_s / n, idle)


@dataclass(frozen=True)
class DispatcherFigures:
    idle_cpu_ms_per_s: float
    idle_cpu_ms_per_s_grpc: float
    """Of which gRPC core's own threads (the clients' channels), the rest being the interpreter's (gunicorn)."""
    drops: int
    deliveries: int
    wall_s: float
    cpu_ms_per_delivery: float
    cpu_ms_per_delivery_less_idle: float


def measure_dispatcher(drops: int, idle_s: float) -> DispatcherFigures:
    with noop_stack() as s:
        one_drop(s, "server-cpu-warm", COLD_ENDED_WITHIN_S)  # its clients made, its channels open
        pid = s.pid(dispatcher())
        idle_by_thread = idle_cpu_ms_per_s(pid, idle_s)
        start_cpu, start, before = session_cpu_seconds(pid), time.monotonic(), dispatch_deliveries(s)
        for i in range(drops):
            one_drop(s, f"server-cpu-{i:03d}")
        cpu_s, wall_s = session_cpu_seconds(pid) - start_cpu, time.monotonic() - start
        deliveries = dispatch_deliveries(s) - before
    if deliveries < 1:
        raise SystemExit(f"the dispatcher logged no delivery for {drops} datasets; see the stack's logs")
    idle = sum(idle_by_thread.values())
    grpc = sum(ms for name, ms in idle_by_thread.items() if name != PYTHON_THREAD)
    per = 1000 * cpu_s / deliveries
    return DispatcherFigures(idle, grpc, drops, deliveries, wall_s, per, per - idle * wall_s / deliveries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=1000, help="deliveries counted per entry point (1000)")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of each idle window (default 30)")
    parser.add_argument("--drops", type=int, default=30, help="datasets through the deployed dispatcher (30)")
    parser.add_argument("--no-stack", action="store_true", help="the server alone: no bench stack, no dispatcher")
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="more environment for the server"
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.deliveries < 100:
        parser.error(f"--deliveries must be at least 100 (CPU is counted in 10 ms ticks), got {args.deliveries}")
    if args.idle < 5 or args.drops < 1:
        parser.error("--idle must be at least 5 seconds and --drops at least 1")
    if any("=" not in pair for pair in args.server_env):
        parser.error(f"--server-env takes NAME=VALUE, got {args.server_env}")
    server_env = dict(pair.split("=", 1) for pair in args.server_env)
    topology = load_topology()
    fed = topology.fed_by(topology.requests_topic)
    subscription = f"projects/{topology.project_id}/subscriptions/{fed.subscription}"
    bodies = push_bodies(WARMUP + args.deliveries, subscription)
    before = machine()
    with tempfile.TemporaryDirectory(prefix="landfall-server-cpu-") as tmp:
        server = [measure_server(target, bodies, Path(tmp), args.idle, server_env) for target in TARGETS]
    wsgi_ms = in_process_ms(bodies)
    after = machine()
    print(
        f"functions-framework server alone ({before['nproc']} CPUs, load {before['load_average']} -> "
        f"{after['load_average']}), {args.deliveries} push deliveries one after another, "
        f"{len(bodies[0]['message']['data'])}-character message data; "
        f"server environment {server_env or 'as the stack sets it'}:"
    )
    print(f"  {'entry point':10s} {'CPU ms / delivery':>18s} {'wall ms / delivery':>19s} {'idle CPU ms / s':>16s}")
    for f in server:
        print(
            f"  {f.target:10s} {f.cpu_ms_per_delivery:18.2f} {f.wall_ms_per_delivery:19.2f} {f.idle_cpu_ms_per_s:16.2f}"
        )
    print(f"  noop called in this process through WSGI (no HTTP, no gunicorn): {wsgi_ms:.2f} CPU ms per delivery")
    entry = next(f for f in server if f.target == "entry")
    dispatcher_figures: DispatcherFigures | None = None
    if not args.no_stack:
        dispatcher_figures = measure_dispatcher(args.drops, args.idle)
        d = dispatcher_figures
        print(
            f"the deployed dispatcher on the bench stack (load {machine()['load_average']}): idle with its clients "
            f"made {d.idle_cpu_ms_per_s:.2f} CPU ms per second (gRPC core's threads {d.idle_cpu_ms_per_s_grpc:.2f}); "
            f"{d.deliveries} deliveries of {d.drops} datasets "
            f"dropped one at a time in {d.wall_s:.0f} s: {d.cpu_ms_per_delivery:.1f} CPU ms per delivery as the load "
            f"test counts it, {d.cpu_ms_per_delivery_less_idle:.1f} without the idle share of that time"
        )
    idle_rate = dispatcher_figures.idle_cpu_ms_per_s if dispatcher_figures else entry.idle_cpu_ms_per_s
    print(
        f"beyond the handler, a load-test delivery holds the server's {entry.cpu_ms_per_delivery:.1f} ms (entry) "
        "plus the idle share: " + ", ".join(f"{idle_rate / rate:.1f} ms at {rate:g}/s" for rate in RATES)
    )
    if args.out:
        figures = {
            "machine": {"before": before, "after": after},
            "server_env": server_env,
            "server": [asdict(f) for f in server],
            "noop_in_process_cpu_ms_per_delivery": wsgi_ms,
            "dispatcher": asdict(dispatcher_figures) if dispatcher_figures else None,
        }
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
