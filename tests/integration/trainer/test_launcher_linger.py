"""The launcher says which processes still run long after one of them ended successfully, and stops none of them."""

from __future__ import annotations

import json
import sys

import pytest

from trainer import launcher
from trainer.distributed import NodeTopology

# local rank 0 ends at once; local rank 1 runs on for a while, then ends successfully too
CHILD = "import os, time; time.sleep(0 if os.environ['LOCAL_RANK'] == '0' else 1.5)"


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], notice_after: float) -> tuple[int, str]:
    monkeypatch.setattr(launcher, "LINGER_NOTICE_SECONDS", notice_after)
    topology = NodeTopology(0, 1, 2, None, None, "single")
    status = launcher.run_node(topology, [], {"PATH": "/usr/bin:/bin"}, command=(sys.executable, "-c", CHILD))
    return status, capsys.readouterr().out


def test_a_process_still_running_after_the_notice_time_is_named_and_left_to_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _run(monkeypatch, capsys, 0.3)
    assert status == 0  # it ended by itself: the notice stopped nothing
    started = next(line for line in _lines(out) if line["message"] == "node started its processes")
    (notice,) = [line for line in _lines(out) if "still run long after" in str(line["message"])]
    pids = started["pids"]
    assert isinstance(pids, list)
    assert notice["severity"] == "WARNING" and notice["pids"] == [pids[1]] and notice["ended_pid"] == pids[0]
    assert "destroy_process_group" in str(notice["hint"])


def test_processes_that_end_together_get_no_notice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _run(monkeypatch, capsys, 5.0)
    assert status == 0
    assert not [line for line in _lines(out) if "still run long after" in str(line["message"])]
