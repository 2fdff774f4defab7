"""`landfall up`, `down`, `restart`, `status`: the local stack."""

from __future__ import annotations

import argparse
import json
import sys

from deploy.local import stack
from deploy.local.processes import StackError
from landfall.tables import render_table


def _ports(values: list[str]) -> dict[str, int]:
    ports: dict[str, int] = {}
    for value in values:
        name, _, port = value.partition("=")
        if not port.isdigit():
            raise StackError(f"--port expects NAME=PORT (e.g. pubsub=9085), got {value!r}")
        ports[name] = int(port)
    return ports


def cmd_up(args: argparse.Namespace) -> int:
    mode = "free" if args.free_ports else "default" if args.default_ports else None
    if (args.port or mode) and stack.status():
        print(
            "landfall up: the local stack is already up, and --port, --free-ports and --default-ports apply only "
            "when it starts (`landfall status` shows its ports): run `landfall down` first, then `landfall up ...`",
            file=sys.stderr,
        )
        return 1
    try:
        info = stack.up(port_overrides=_ports(args.port), ports=mode)
    except StackError as exc:
        print(f"landfall up: {exc}", file=sys.stderr)
        return 1
    print(info.env_file.read_text(), end="")
    if info.restarted:
        print(f"# started again (they were down): {', '.join(info.restarted)}", file=sys.stderr)
    print(
        f"# the local stack is up; `source {info.env_file}` to use gcloud and the client libraries against it",
        file=sys.stderr,
    )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    try:
        stopped = stack.down(wipe=args.wipe)
    except StackError as exc:
        print(f"landfall down: {exc}", file=sys.stderr)
        return 1
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    if args.wipe:
        print("wiped: Firestore documents, bucket objects and Vertex jobs; the next `landfall up` starts empty")
    return 0


def _env(values: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key:
            raise StackError(f"--env expects KEY=VALUE (e.g. LANDFALL_SUBMISSION_LEASE_SECONDS=10), got {value!r}")
        env[key] = setting
    return env


def cmd_restart(args: argparse.Namespace) -> int:
    try:
        service = stack.restart(args.service, extra_env=_env(args.env))
    except StackError as exc:
        print(f"landfall restart: {exc}", file=sys.stderr)
        return 1
    where = "" if service.port is None else f" on 127.0.0.1:{service.port}"
    print(f"restarted {service.name}{where} (pid {service.pid}); log {service.log_path}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    entries = stack.status()
    if args.json:
        print(
            json.dumps(
                [
                    {"name": s.name, "pid": s.pid, "port": s.port, "up": alive, "log": str(s.log_path)}
                    for s, alive in entries
                ],
                indent=2,
            )
        )
    elif not entries:
        print("the local stack is not running (`landfall up` starts it)")
    else:
        rows = [
            [s.name, "-" if s.port is None else s.port, s.pid, "up" if alive else "DOWN", s.log_path]
            for s, alive in entries
        ]
        print(render_table(["SERVICE", "PORT", "PID", "STATE", "LOG"], rows))
    return 0 if entries and all(alive for _, alive in entries) else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up",
        help="start the local stack (emulators, functions, Vertex emulator, scheduler) and print its env",
        description="Start every local stand-in and write .landfall/env. Ports: --port NAME=PORT, else "
        f"--free-ports / --default-ports / {stack.PORTS_ENV}=free|default, else the ports the last stack "
        "in this state folder used (kept in .landfall/ports.json across `down`), else deploy/topology.toml's. "
        f"The scheduler ticks each [schedules.*] topic every every_seconds; {stack.SWEEP_EVERY_ENV}=N makes "
        "it every N seconds.",
    )
    ported = [name for name in stack.SERVICE_ORDER if name not in stack.PORTLESS_SERVICES]
    p.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="NAME=PORT",
        help=f"use PORT for service NAME ({', '.join(ported)}); repeatable; 0 picks a free port",
    )
    choice = p.add_mutually_exclusive_group()
    choice.add_argument(
        "--free-ports",
        action="store_true",
        help=f"a free port for every service ({stack.PORTS_ENV}=free does the same, also for `landfall demo`); "
        "without it `up` reuses the ports the last stack here used",
    )
    choice.add_argument(
        "--default-ports",
        action="store_true",
        help="the ports of deploy/topology.toml [local.ports], whatever the last stack here used",
    )
    p.set_defaults(func=cmd_up)
    p = sub.add_parser(
        "down",
        help="stop exactly the processes `landfall up` started; data is kept",
        description="Stop the local stack. Firestore documents, bucket objects and Vertex jobs are kept "
        "for the next `landfall up` (docs/local_stack.md); --wipe deletes them.",
    )
    p.add_argument("--wipe", action="store_true", help="also delete the kept data, so the next `up` starts empty")
    p.set_defaults(func=cmd_down)
    p = sub.add_parser(
        "restart",
        help="stop one service of the local stack and start it again on its port",
        description="Restart one service with the environment `landfall up` gave it; its log is "
        "appended to. Firestore and the bucket keep their data; Pub/Sub gets its topics "
        "and subscriptions again but loses the messages it held.",
    )
    p.add_argument(
        "service", choices=stack.SERVICE_ORDER, metavar="SERVICE", help=f"one of: {', '.join(stack.SERVICE_ORDER)}"
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra variable for this run of the service (repeatable); a later restart drops it",
    )
    p.set_defaults(func=cmd_restart)
    p = sub.add_parser("status", help="say which parts of the local stack are up")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_status)
