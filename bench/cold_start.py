"""Cold-start benchmark: each deployed function against the floor of the client libraries it needs.

    .venv/bin/python bench/cold_start.py [--repeat 15] [--separate] [--function NAME] [--json]

For every function of deploy/topology.toml ([functions.*]), in fresh interpreters, --repeat times each:

  function  what an instance does before its first request is handled: `import functions.main`, resolve the entry
            point, run the imports its body makes at first call (read from functions/main.py, so the measure follows
            the code) and call the functions.wiring builders it names, then build every client the function uses
            (the ones wiring leaves lazy included: the regional JobServiceClient, the Pub/Sub publisher).
  floor     the least any implementation could do: import functions_framework (the server that loads every
            function) and the client libraries that function needs, and build the same clients.

By default both are measured in one interpreter (paired): the floor first, then the function's cold start, whose
total is the function's cold start (it needs everything the floor does; the libraries are imported once, and
building a client a second time costs about a millisecond). Its ratio to the floor is measured in one run, under
one load; the figure is the median ratio. --separate times each side in its own interpreters, alternating, and
divides the medians: the literal measure, noisier where other work shares the machine.

The verdict reads CPU time (what the interpreter itself spent; on a shared machine wall time mostly measures the
others); wall time is printed beside it. Target: every ratio at most 1.1; exit status 1 when one is
above. Building a client opens no connection: the emulator variables point at a port nothing listens on, so no
credentials are looked up and nothing is reached. Interpreter start-up, the same for both, is left out.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.topology import load_topology  # noqa: E402

MAIN = REPO / "functions" / "main.py"
TARGET = 1.1

CLIENTS: dict[str, tuple[str, str]] = {
    # name: (how functions/ builds it, how the floor builds it with the library alone)
    "firestore": (
        "from functions.gcp import clients\nclients.firestore_client()",
        "from google.cloud import firestore\nfirestore.Client(project='landfall-bench')",
    ),
    "storage": (
        "from functions.gcp import clients\nclients.storage_client()",
        "from google.auth.credentials import AnonymousCredentials\nfrom google.cloud import storage\n"
        "storage.Client(project='landfall-bench', credentials=AnonymousCredentials())",
    ),
    "publisher": (
        "from functions.gcp import clients\nclients.publisher_client()",
        "from google.cloud import pubsub_v1\npubsub_v1.PublisherClient()",
    ),
    "job_service": (
        "from functions.gcp import clients\nclients.job_service_client('us-central1')",
        "import grpc\n"
        "from google.cloud.aiplatform_v1.services.job_service import JobServiceClient\n"
        "from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport\n"
        "JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel("
        "os.environ['LANDFALL_VERTEX_ENDPOINT'])))",
    ),
}

CLIENT_FOR_ROLE = {
    "roles/datastore.user": "firestore",
    "roles/aiplatform.user": "job_service",
    "roles/storage.objectViewer": "storage",
    "roles/pubsub.publisher": "publisher",
}
"""A role a function's service account holds (deploy/topology.toml [gcp.service_accounts]) -> the client it builds to
use it; roles on other identities (iam.serviceAccountUser) build none."""


def uses(function: str) -> tuple[str, ...]:
    """The clients the function's handler reaches, in CLIENT_FOR_ROLE order: those its service account's grants are
    for (Firestore for all; the landing bucket and the requests topic for ingest and the sweep; Vertex for the rest,
    which also read job outputs and publish RunFinished)."""
    from deploy.gcp.config import load_deploy_config

    config = load_deploy_config()
    roles = {grant.role for grant in config.account(config.function(function).service_account).grants}
    return tuple(client for role, client in CLIENT_FOR_ROLE.items() if role in roles)


def first_call_code(entry: str) -> str:
    """What the entry point's first call runs before its handler: the imports in its body, then the deps builders
    it imports from functions.wiring (names ending in _deps), called."""
    tree = ast.parse(MAIN.read_text(encoding="utf-8"))
    body = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == entry), None)
    if body is None:
        raise SystemExit(f"functions/main.py has no entry point {entry!r}; deploy/topology.toml names it")
    lines = []
    for node in ast.walk(body):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = ", ".join(alias.name for alias in node.names)
            lines.append(f"from {node.module} import {names}")
            if node.module == "functions.wiring":
                lines += [f"{alias.name}()" for alias in node.names if alias.name.endswith("_deps")]
        elif isinstance(node, ast.Import):
            lines.append("import " + ", ".join(alias.name for alias in node.names))
    return "\n".join(lines)


CLOCKS = "time.process_time(), time.perf_counter()"


def separate_program(body: str) -> str:
    """A program that prints the CPU and wall seconds body took."""
    return (
        f"import os, time\n_c0, _w0 = {CLOCKS}\n{body}\n_c1, _w1 = {CLOCKS}\n"
        "print(_c1 - _c0, _w1 - _w0, _c1 - _c0, _w1 - _w0)\n"
    )


def paired_program(floor: str, body: str) -> str:
    """A program that runs the floor, then the function's cold start: it prints the CPU and wall seconds of the
    floor and of both together. The function needs everything the floor does (the same libraries, imported once;
    building a client again costs about a millisecond), so both together are the function's cold start."""
    return (
        f"import os, time\n_c0, _w0 = {CLOCKS}\n{floor}\n_c1, _w1 = {CLOCKS}\n{body}\n_c2, _w2 = {CLOCKS}\n"
        "print(_c1 - _c0, _w1 - _w0, _c2 - _c0, _w2 - _w0)\n"
    )


@dataclass(frozen=True)
class Case:
    function: str
    clients: tuple[str, ...]
    body: str
    """The function's cold start: import functions.main, resolve the entry point, its first call's imports and
    builders, its clients."""
    floor: str
    """functions_framework and the libraries of those clients, imported, and the same clients built."""


def cases() -> list[Case]:
    out = []
    for function in (route.name for route in load_topology().functions):
        clients = uses(function)
        body = "\n".join(
            [
                "import functions.main",
                f"functions.main.{function}",
                first_call_code(function),
                *(CLIENTS[c][0] for c in clients),
            ]
        )
        floor = "\n".join(["import functions_framework", *(CLIENTS[c][1] for c in clients)])
        out.append(Case(function, clients, body, floor))
    return out


def environment() -> dict[str, str]:
    """Emulator hosts on a port nothing listens on: clients are built without credentials and reach nothing.
    PYTHONDONTWRITEBYTECODE is dropped so that the warm-up run caches the bytecode of Landfall's own modules, as the
    client libraries' is (installed with it): both sides are timed from bytecode. With the variable (set on these
    machines), Landfall's modules were compiled from source in every timed interpreter while the floor's were not,
    which added about 0.05 to 0.07 to every ratio."""
    keep = ("LANDFALL_", "GOOGLE_", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(keep)}
    unused = "127.0.0.1:9"
    env.update(
        PYTHONPATH=str(REPO),
        GOOGLE_CLOUD_PROJECT="landfall-bench",
        PUBSUB_EMULATOR_HOST=unused,
        FIRESTORE_EMULATOR_HOST=unused,
        STORAGE_EMULATOR_HOST=f"http://{unused}",
        LANDFALL_VERTEX_ENDPOINT=unused,
    )
    return env


def run_once(program: str, env: dict[str, str]) -> tuple[float, float, float, float]:
    """One fresh interpreter: (floor CPU, floor wall, function CPU, function wall) in seconds."""
    proc = subprocess.run([sys.executable, "-c", program], env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cold-start program failed ({proc.returncode}):\n{program}\n{proc.stderr[-3000:]}")
    floor_cpu, floor_wall, cpu, wall = (float(v) for v in proc.stdout.strip().splitlines()[-1].split())
    return floor_cpu, floor_wall, cpu, wall


def measure(case: Case, repeat: int, separate: bool, env: dict[str, str]) -> list[tuple[float, float, float, float]]:
    """repeat samples of (floor CPU, floor wall, function CPU, function wall)."""
    if not separate:
        return [run_once(paired_program(case.floor, case.body), env) for _ in range(repeat)]
    out = []
    for _ in range(repeat):  # alternate the sides, so that a load that comes and goes weighs on both
        floor_cpu, floor_wall, _, _ = run_once(separate_program(case.floor), env)
        _, _, cpu, wall = run_once(separate_program(case.body), env)
        out.append((floor_cpu, floor_wall, cpu, wall))
    return out


class Figures(TypedDict):
    """One function's cold start (what --json prints per function)."""

    function: str
    clients: list[str]
    cpu_ms: float
    floor_cpu_ms: float
    ratio: float
    wall_ms: float
    floor_wall_ms: float
    wall_ratio: float
    ok: bool


def summary(case: Case, samples: list[tuple[float, float, float, float]], separate: bool) -> Figures:
    def med(i: int) -> float:
        return statistics.median(s[i] for s in samples)

    if separate:  # ratio of the medians of the two sides
        ratio, wall_ratio = med(2) / med(0), med(3) / med(1)
    else:  # median of the ratios, each measured in one interpreter
        ratio = statistics.median(s[2] / s[0] for s in samples)
        wall_ratio = statistics.median(s[3] / s[1] for s in samples)
    return {
        "function": case.function,
        "clients": list(case.clients),
        "cpu_ms": 1000 * med(2),
        "floor_cpu_ms": 1000 * med(0),
        "ratio": ratio,
        "wall_ms": 1000 * med(3),
        "floor_wall_ms": 1000 * med(1),
        "wall_ratio": wall_ratio,
        "ok": ratio <= TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="fresh interpreters per function (15)")
    parser.add_argument(
        "--separate",
        action="store_true",
        help="time the function and its floor in separate interpreters (noisier on a loaded machine)",
    )
    parser.add_argument("--function", action="append", help="only this function (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--show", action="store_true", help="print each timed program and exit")
    ns = parser.parse_args()
    chosen = [c for c in cases() if not ns.function or c.function in ns.function]
    if not chosen:
        parser.error(f"--function: expected one of {', '.join(route.name for route in load_topology().functions)}")
    if ns.show:
        for case in chosen:
            print(f"# {case.function}\n{paired_program(case.floor, case.body)}")
        return 0
    env = environment()
    load_before = os.getloadavg()
    started = time.monotonic()
    for case in chosen:  # compile and cache every module once before timing
        run_once(paired_program(case.floor, case.body), env)
    results = [summary(case, measure(case, ns.repeat, ns.separate, env), ns.separate) for case in chosen]
    load_after = os.getloadavg()
    method = "separate" if ns.separate else "paired"
    if ns.json:
        print(
            json.dumps(
                {
                    "repeat": ns.repeat,
                    "method": method,
                    "cpus": os.cpu_count(),
                    "load_before": load_before,
                    "load_after": load_after,
                    "target": TARGET,
                    "results": results,
                },
                indent=2,
            )
        )
        return 0 if all(r["ok"] for r in results) else 1
    print(
        f"cold start: {ns.repeat} fresh interpreters per function ({method}); {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({time.monotonic() - started:.0f} s)"
    )
    print(f"ratio = function / floor in CPU time (the verdict, target <= {TARGET}); wall time beside it")
    print(
        f"{'function':<20} {'clients':<40} {'CPU ms':>7} {'floor':>6} {'ratio':>6}   {'wall ms':>7} "
        f"{'floor':>6} {'ratio':>6}"
    )
    for r in results:
        verdict = "ok" if r["ok"] else f"ABOVE {TARGET}"
        print(
            f"{r['function']:<20} {', '.join(r['clients']):<40} {r['cpu_ms']:>7.0f} {r['floor_cpu_ms']:>6.0f} "
            f"{r['ratio']:>6.2f}   {r['wall_ms']:>7.0f} {r['floor_wall_ms']:>6.0f} {r['wall_ratio']:>6.2f}  "
            f"{verdict}"
        )
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
