"""`landfall drop` and `landfall watch` on the local stack, as a user runs them, when something is wrong: each says
what in one line. The good path (a folder dropped, its run watched to SUCCEEDED, the same folder again a duplicate)
is the chain test, tests/e2e/test_chain.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.errors import CommandError

pytestmark = pytest.mark.e2e


def landfall(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args: argparse.Namespace = build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_drop_and_watch_say_what_is_wrong_in_one_line(
    local_stack: stack.StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CommandError, match="holds no files"):
        landfall(capsys, "drop", str(tmp_path), "gs://landfall-landing/datasets/empty/")
    with pytest.raises(CommandError, match="gs://BUCKET/PREFIX/"):
        landfall(capsys, "drop", str(tmp_path), "landfall-landing/datasets/x/")
    with pytest.raises(CommandError, match="no run 'run-nope'"):
        landfall(capsys, "watch", "run-nope")
