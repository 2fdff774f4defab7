"""The `landfall` command: parses flags and calls one command function. Commands live in landfall/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules with a register(subparsers) function, in the order their commands appear in --help.
COMMAND_MODULES = ("stack", "demo", "runs", "datasets", "planning", "deploy")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
