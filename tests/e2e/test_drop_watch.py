"""`landfall drop` and `landfall watch` on the local stack, as a user runs them: a folder lands as a dataset (files,
then the marker), drop prints the dataset REQUESTED and its run, watch follows that run to SUCCEEDED."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.errors import CommandError
from landfall.synthetic import separable_csv_shards
from schemas.run_record import parse_run_record

pytestmark = pytest.mark.e2e


def landfall(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args: argparse.Namespace = build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_drop_lands_a_folder_and_watch_follows_its_run_to_the_end(
    local_stack: stack.StackInfo,
    landing_bucket: Any,
    firestore_runs: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = tmp_path / "churn"
    (folder / "part").mkdir(parents=True)
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=150)):
        (folder / "part" / f"shard-{i}.csv").write_text(text)
    uri = f"gs://{landing_bucket.name}/datasets/e2e-drop/"

    code, out, err = landfall(capsys, "drop", str(folder), uri)
    assert code == 0, err
    assert "upload" in err and "100%" in err  # the progress bar, on stderr
    assert re.search(r"status\s+REQUESTED", out), out
    run_id = re.search(r"^run\s+(run-[0-9a-f]{20})", out, re.M).group(1)  # type: ignore[union-attr]
    names = sorted(b.name for b in landing_bucket.list_blobs(prefix="datasets/e2e-drop/"))
    assert names == [
        "datasets/e2e-drop/_SUCCESS",
        "datasets/e2e-drop/part/shard-0.csv",
        "datasets/e2e-drop/part/shard-1.csv",
    ]

    code, out, err = landfall(capsys, "watch", run_id)
    run = parse_run_record(firestore_runs.document(run_id).get().to_dict())
    assert code == 0 and run.state == "SUCCEEDED", (out, err)
    lines = out.splitlines()
    printed = [line.split()[1] for line in lines if not line.startswith((" ", "run "))]
    assert printed == [h.state for h in run.history]
    assert lines[-1].startswith(f"run {run_id} ended SUCCEEDED: ") and "accuracy" in lines[-1]
    assert any(re.search(r"step \d+/\d+", line) for line in lines) or run.timings.run_seconds is not None

    # --quiet: no bar; the same files again are a duplicate of that run, which drop prints.
    code, out, err = landfall(capsys, "drop", str(folder), uri, "--quiet")
    assert err == "" and re.search(r"status\s+DUPLICATE", out) and run_id in out


def test_drop_and_watch_say_what_is_wrong_in_one_line(
    local_stack: stack.StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CommandError, match="holds no files"):
        landfall(capsys, "drop", str(tmp_path), "gs://landfall-landing/datasets/empty/")
    with pytest.raises(CommandError, match="gs://BUCKET/PREFIX/"):
        landfall(capsys, "drop", str(tmp_path), "landfall-landing/datasets/x/")
    with pytest.raises(CommandError, match="no run 'run-nope'"):
        landfall(capsys, "watch", "run-nope")
