"""The `landfall` command: parses flags and calls one command function. Commands live in landfall/commands/."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# Modules with a register(subparsers) function, in the order their commands appear in --help: a name is
# landfall/commands/NAME.py, a dotted name a module of its own (the dashboard's command lives in its package, which
# builds on the commands' read code: the import contracts in pyproject.toml put it above them).
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
    "models",
    "teams",
    "dead_letters",
    "landfall.ui.command",
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
    "submit": ("firestore", "pubsub"),
    "drop": ("storage", "firestore"),
    "watch": ("firestore",),
    "reconcile": ("pubsub",),
    "cancel": ("firestore", "vertex"),
    "retry": ("firestore", "pubsub"),
    "dead-letters": ("pubsub",),
    "models": ("vertex",),
    "model": ("vertex",),
    "promote": ("firestore", "vertex"),
    "rollback": ("firestore", "vertex"),
    "teams": ("firestore",),
    "ui": ("firestore",),
}
"""The services each command reads or writes; they are checked (landfall/reach.py) before the command runs, so a
stopped stack is one line at once, not a client retrying for minutes. Commands not named here need no stack or,
like `demo`, start it."""


class Parser(argparse.ArgumentParser):
    """argparse, but a refused command line is one line, the reason and where to look, not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` shows the options)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value that is not one of the choices (a mistyped command, `wacth`) is refused with the nearest choices
        (difflib), not the whole list."""
        choices = action.choices
        if choices is not None and isinstance(value, str) and value not in choices:
            names = [str(c) for c in choices]
            close = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"the choices are: {', '.join(names)}"
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}; {hint}")
        super()._check_value(action, value)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="landfall",
        description="Landfall: data landing in Cloud Storage becomes training runs on Vertex AI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        path = name if "." in name else f"landfall.commands.{name}"
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name == path:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status. Output piped into a reader that stops early (`landfall runs | head`) ends the
    command quietly, as `cat` does, instead of a BrokenPipeError traceback."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # inside the guard (--help too): a pipe closed early fails here, not at exit
    except BrokenPipeError:
        # Python's documented recipe (library/signal.html, "Note on SIGPIPE"): point stdout at devnull so that the
        # interpreter's last flush does not fail again, and exit non-zero.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
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
        if args.command not in ("up", "down", "restart", "status", "deploy", "teardown", "ui"):
            from landfall.access import act_as_chosen_identity

            act_as_chosen_identity(os.environ)
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
