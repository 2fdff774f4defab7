"""The `landfall` command: parses flags and calls one command function. Commands live in landfall/commands/."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

# Modules with a register(subparsers) function, in the order their commands appear in --help.
COMMAND_MODULES = (
    "stack",
    "demo",
    "drop",
    "submit",
    "runs",
    "watch",
    "logs",
    "datasets",
    "operations",
    "retry",
    "dead_letters",
    "planning",
    "deploy",
)
STACK_NEEDS = {
    "runs": ("firestore",),
    "run": ("firestore",),
    "logs": ("firestore",),
    "datasets": ("firestore",),
    "dataset": ("firestore",),
    "sweep": ("pubsub",),
    "retrain": ("firestore", "storage", "pubsub"),
    "submit": ("pubsub",),
    "drop": ("storage", "firestore"),
    "watch": ("firestore",),
    "reconcile": ("pubsub",),
    "cancel": ("firestore", "vertex"),
    "retry": ("firestore", "pubsub"),
    "dead-letters": ("pubsub",),
}
"""The services each command reads or writes; they are checked (landfall/reach.py) before the command runs, so a
stopped stack is one line at once, not a client retrying for minutes. Commands not named here need no stack or,
like `demo`, start it."""


class Parser(argparse.ArgumentParser):
    """argparse, but a refused command line is one line, the reason and where to look, not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` shows the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="landfall",
        description="Landfall: data landing in Cloud Storage becomes training runs on Vertex AI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"landfall.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"landfall.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # deploy/teardown talk to Google Cloud: the local stack's variables (emulator hosts, gcloud overrides) stay out.
    if args.command not in ("up", "down", "restart", "status", "deploy", "teardown"):
        from landfall.stack_env import load_stack_env

        load_stack_env()
    from landfall.errors import CommandError

    try:
        if args.command in STACK_NEEDS:
            _check_stack(STACK_NEEDS[args.command])
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"landfall {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _check_stack(needs: Sequence[str]) -> None:
    from deploy.local import provision, stack
    from landfall import reach

    state_dir = provision.default_state_dir()
    reach.check_stack(needs, os.environ, state_dir, stack.read_state(state_dir), answers=reach.port_answers)


if __name__ == "__main__":
    sys.exit(main())
