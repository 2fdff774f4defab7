"""Replica processes: start one, watch it, stop it together with every process it started.

Each replica runs in its own session (start_new_session=True), so it leads a process group holding the
replica and all its children (e.g. the per-GPU workers the trainer spawns). Stopping a replica signals that
whole group: SIGTERM, a grace period, then SIGKILL. stdout and stderr go to one log file per replica, opened
for appending so a restarted replica (spot preemption) continues the same file.

The pids of running replica groups are recorded in the job's folder so that, after the emulator itself was
killed, the next emulator can stop what is left (only processes whose identity still matches the record).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

WAIT_STEP_SECONDS = 0.02
KILL_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class ReplicaLaunch:
    """Everything needed to start (and restart) one replica.

    name: Vertex's task name (`workerpool0-0`). argv: the command line. env: the full environment.
    cwd: working directory. log_path: file receiving stdout and stderr.
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    mark: str = ""
    """A variable of env unique to this replica (its own disk folder, say): every process it starts inherits it, so
    that a process that left the replica's group (torchrun's workers run in sessions of their own) is stopped too,
    as a container's teardown stops everything in it. "" stops the group only."""


class ReplicaProcess:
    """One running replica: a process group led by the replica's command."""

    def __init__(self, launch: ReplicaLaunch) -> None:
        self.launch = launch
        self._popen: subprocess.Popen | None = None
        self.starts = 0

    @property
    def name(self) -> str:
        return self.launch.name

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        """Start (or restart) the replica. Raises OSError when the command cannot be executed."""
        self.launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.launch.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                list(self.launch.argv),
                cwd=self.launch.cwd,
                env=dict(self.launch.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    def poll(self) -> int | None:
        """The exit status once the replica's own process ended (negative: killed by that signal), else None."""
        return self._popen.poll() if self._popen else None

    def stop(self, grace_seconds: float) -> None:
        """Stop the replica and every process of its group: SIGTERM, wait up to grace_seconds, then SIGKILL."""
        stop_all([self], grace_seconds)


def stop_all(processes: Sequence[ReplicaProcess], grace_seconds: float) -> None:
    """Stop several replicas at once: SIGTERM to every group, one shared grace period, SIGKILL to what is left.

    Also reaps the replicas' own processes, so none is left as a zombie.
    """
    started = [p._popen for p in processes if p._popen is not None]
    marks = [
        f"{p.launch.mark}={p.launch.env[p.launch.mark]}".encode()
        for p in processes
        if p.launch.mark and p.launch.mark in p.launch.env
    ]
    signalled = [popen for popen in started if _signal_group(popen.pid, signal.SIGTERM)]
    strays = _signal_marked(marks, signal.SIGTERM)
    _wait_groups_gone(signalled, grace_seconds, strays)
    killed = [popen for popen in signalled if _signal_group(popen.pid, signal.SIGKILL)]
    strays = _signal_marked(marks, signal.SIGKILL)
    _wait_groups_gone(killed, KILL_WAIT_SECONDS, strays)
    for popen in started:
        try:
            popen.wait(timeout=KILL_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            continue


def _wait_groups_gone(popens: Sequence[subprocess.Popen], seconds: float, strays: Sequence[int] = ()) -> None:
    """Wait up to `seconds` until no process of these groups, and none of strays, is left (reaping the leaders as
    they exit)."""
    deadline = time.monotonic() + seconds
    while (popens or strays) and time.monotonic() < deadline:
        for popen in popens:
            popen.poll()
        if not any(_group_alive(popen.pid) for popen in popens) and not any(map(_alive, strays)):
            return
        time.sleep(WAIT_STEP_SECONDS)


def _signal_marked(marks: Sequence[bytes], sig: signal.Signals) -> list[int]:
    """Send sig to every process of this user whose environment holds one of marks (NAME=VALUE); their pids."""
    if not marks:
        return []
    hit = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if any(mark in environ for mark in marks):
            try:
                os.kill(int(entry.name), sig)
                hit.append(int(entry.name))
            except ProcessLookupError:
                continue
    return hit


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[2] != "Z"


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send sig to a process group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def _group_alive(pgid: int) -> bool:
    """True while some process of the group exists that is not a zombie."""
    return any(fields[2] != "Z" for fields in map(_stat_fields, _pids_where(lambda f: int(f[4]) == pgid)) if fields)


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat, with the command name removed, so index 0 is the pid, 2 the state, 4 the pgrp
    and 5 the session (see proc(5)); the start time is index 21. Empty when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    head, _, tail = raw.rpartition(")")
    return [head.split(" ", 1)[0], "", *tail.split()]


def _pids_where(predicate: Callable[[list[str]], bool]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if len(fields) > 21 and predicate(fields):
                pids.append(int(entry.name))
    return pids


def process_identity(pid: int) -> str | None:
    """A string naming this exact process (pid plus kernel start time), or None when it is gone."""
    fields = _stat_fields(pid)
    return f"{pid}:{fields[21]}" if len(fields) > 21 else None


def record_processes(path: Path, processes: Sequence[ReplicaProcess]) -> None:
    """Write the identities of the running replica groups next to the job, each with its mark (NAME=VALUE, or "")."""
    records = {}
    for p in processes:
        identity = process_identity(p.pid) if p.pid is not None else None
        if identity:
            mark = f"{p.launch.mark}={p.launch.env[p.launch.mark]}" if p.launch.mark in p.launch.env else ""
            records[p.name] = {"process": identity, "mark": mark}
    path.write_text(json.dumps(records))


def _in_session(fields: list[str], session: int) -> bool:
    """Whether the process whose /proc/PID/stat fields these are belongs to the session led by pid `session`."""
    return int(fields[5]) == session


def kill_leftovers(path: Path) -> list[int]:
    """Kill what is left of replica groups recorded in `path` by an emulator that died; return the pids killed.

    A process is killed only when it is the recorded group leader with the same start time, a member of the session
    that recorded leader created (its session id equals the leader's pid), or carries the replica's mark in its
    environment (a process it started in a session of its own).
    """
    if not path.is_file():
        return []
    recorded = json.loads(path.read_text())
    entries = list(recorded.values()) if isinstance(recorded, dict) else []
    # an older emulator wrote the identity alone
    entries = [{"process": e, "mark": ""} if isinstance(e, str) else e for e in entries]
    valid = all(isinstance(e, dict) and isinstance(e.get("process"), str) for e in entries)
    if not isinstance(recorded, dict) or not valid:
        raise ValueError(f"{path}: expected an object of replica name -> {{process, mark}}, as record_processes writes")
    identities = [str(e["process"]) for e in entries]
    marks = [str(e.get("mark") or "").encode() for e in entries if e.get("mark")]
    killed: list[int] = _signal_marked(marks, signal.SIGKILL)
    for identity in identities:
        leader = int(identity.split(":", 1)[0])
        alive_leader = process_identity(leader) == identity
        members = _pids_where(partial(_in_session, session=leader))
        if alive_leader or members:
            _signal_group(leader, signal.SIGKILL)
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            killed.extend(sorted({leader, *members}) if alive_leader else members)
    path.unlink(missing_ok=True)
    return sorted(set(killed))
