"""The CLI's manners as a user meets them, through the real `landfall` process against the emulators: bad
input is one line and a non-zero exit, never a traceback; output piped into a reader that
stops early ends quietly; `landfall drop` to a prefix no route covers is refused before anything is uploaded."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.routes import read_routes
from landfall.cli import build_parser
from landfall.errors import CommandError
from tests.conftest import PROJECT, Emulator

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
REPO = Path(__file__).resolve().parents[2]
BUCKET = "landfall-landing"


@pytest.fixture()
def settings_env(clean_firestore: Emulator) -> Iterator[None]:
    from functions.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def landfall_process(
    tmp_path: Path, *argv: str, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    """The real `landfall` command, in this session's emulator environment (no stack state folder of its own)."""
    env = {**os.environ, "LANDFALL_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-m", "landfall.cli", *argv],
        cwd=REPO,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["submit", "REQUEST"],
        ["run", "runs/x"],
        ["logs", "../x"],
        ["watch", "runs/x"],
        ["retry", "../x"],
        ["cancel", "runs/x"],
    ],
    ids=lambda argv: "-".join(argv).replace("/", "_"),
)
def test_bad_input_is_one_line_and_a_non_zero_exit_not_a_traceback(
    argv: list[str], pubsub_emulator: Emulator, settings_env: None, tmp_path: Path
) -> None:
    request = tmp_path / "request.json"
    # Latin-1 text, as an editor on another system may save it: "é" is the single byte 0xe9
    request.write_bytes('{"dataset": {"uri": "gs://b/caf\u00e9/"}, "task": "tabular-classification"}'.encode("latin-1"))
    proc = landfall_process(tmp_path, *[str(request) if a == "REQUEST" else a for a in argv])
    print(proc.stderr)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"landfall {argv[0]}: ")
    if argv[0] == "submit":
        assert "is not UTF-8 text (byte 0xe9 at offset" in proc.stderr
    else:
        assert f"{argv[1]!r} is not a run id" in proc.stderr


def test_output_piped_into_a_reader_that_stopped_ends_quietly(settings_env: None, tmp_path: Path) -> None:
    """`landfall runs | head`: the reader is gone before the command writes (its end of the pipe closed)."""
    for argv in (["runs"], ["--help"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = landfall_process(tmp_path, *argv, stdout=write_end)
        finally:
            os.close(write_end)
        assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
        assert proc.stderr == "" and proc.returncode in (0, 1)


@pytest.fixture()
def landing(gcs_emulator: Emulator, settings_env: None) -> Iterator[None]:
    from deploy.local import provision
    from tests.caches import clear_function_caches

    provision.create_bucket(BUCKET, PROJECT)
    clear_function_caches()
    yield
    clear_function_caches()


def test_drop_to_a_prefix_no_route_covers_is_refused_before_uploading(
    landing: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    (tmp_path / "part-0.csv").write_text("x,label\n1,a\n")
    args: argparse.Namespace = build_parser().parse_args(
        ["drop", str(tmp_path), f"gs://{BUCKET}/unrouted/mydata/", "--wait", "1", "--quiet"]
    )
    with pytest.raises(CommandError) as refused:
        args.func(args)
    said = str(refused.value)
    assert said.startswith(f"no route covers gs://{BUCKET}/unrouted/mydata/") and "nothing was uploaded" in said
    for route in read_routes():
        assert f"gs://{route.bucket}/{route.prefix}" in said
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    assert [b.name for b in client.list_blobs(BUCKET, prefix="unrouted/")] == []
