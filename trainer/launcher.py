"""Start one training process per GPU (or LANDFALL_NPROC_PER_NODE on CPU) on this node, torchrun style.

Vertex starts one process per replica. This launcher re-runs `python -m trainer.task` with the same arguments
once per local rank, giving each child torchrun's variables (global RANK = node rank x processes per node + local
rank) and, unless OMP_NUM_THREADS is set, an equal share of the CPU cores for intra-op threads (as torchrun
does, so the processes do not oversubscribe the CPU). It forwards SIGTERM/SIGINT to the children (Vertex's
preemption notice, so they can checkpoint), and when one child fails it stops the others so the replica exits
non-zero instead of hanging in a collective.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from schemas.trainer_failure import TrainerFailure
from trainer.distributed import NodeTopology, child_environ, free_port
from trainer.errors import TRAINER_STATUSES
from trainer.failure import record_failure
from trainer.logs import log

_SETTLE_SECONDS = 5.0
"""How long the others may take to fail by themselves after one process failed."""
_GRACE_SECONDS = 15.0
"""How long the others get to exit after one process failed, before SIGKILL."""


def run_node(topology: NodeTopology, argv: list[str], environ: Mapping[str, str]) -> int:
    """Run this node's processes to completion; returns the exit status the replica should end with."""
    if topology.num_nodes == 1:
        master_addr, master_port = "127.0.0.1", topology.master_port or free_port()
    else:
        assert topology.master_addr is not None and topology.master_port is not None
        master_addr, master_port = topology.master_addr, topology.master_port
    children: list[subprocess.Popen[bytes]] = []
    threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // topology.nproc_per_node))}
    for local_rank in range(topology.nproc_per_node):
        env = {**threads, **environ, **child_environ(topology, local_rank, master_addr, master_port)}
        children.append(subprocess.Popen([sys.executable, "-m", "trainer.task", *argv], env=env))
    log(
        "node started its processes",
        node_rank=topology.node_rank,
        nproc_per_node=topology.nproc_per_node,
        world_size=topology.world_size,
        pids=[c.pid for c in children],
    )

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _wait_all(children, environ)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_all(children: list[subprocess.Popen[bytes]], environ: Mapping[str, str]) -> int:
    """Wait for every child; at the first failure stop the rest. Returns the status that explains the failure."""
    by_pid = {child.pid: child for child in children}
    while by_pid:
        pid, raw = os.wait()
        child = by_pid.pop(pid, None)
        if child is None:
            continue
        child.returncode = os.waitstatus_to_exitcode(raw)
        if child.returncode != 0:
            hint = (
                (
                    "killed by SIGKILL: most often the host ran out of memory (lower --batch-size or use a larger "
                    "machine)"
                )
                if child.returncode == -signal.SIGKILL
                else None
            )
            log(
                "a training process failed; stopping the others",
                severity="ERROR",
                pid=pid,
                exit_code=child.returncode,
                hint=hint,
            )
            if child.returncode < 0:  # killed by a signal: the child could leave no failure record of its own
                _record_killed(child, environ)
            _stop(list(by_pid.values()))
            return _explaining_status([c.returncode for c in children if c.returncode is not None])
    return 0


def _record_killed(child: subprocess.Popen[bytes], environ: Mapping[str, str]) -> None:
    signum = -(child.returncode or 0)
    name = signal.Signals(signum).name if signum in signal.valid_signals() else f"signal {signum}"
    cause = (
        "most often the host ran out of memory: lower --batch-size or use a machine with more RAM"
        if signum == signal.SIGKILL
        else "stopped from outside the trainer"
    )
    message = f"a training process (pid {child.pid}) was killed by {name}: {cause}"
    record_failure(environ, TrainerFailure(kind="Killed", message=message, exit_code=128 + signum))


def _explaining_status(codes: list[int]) -> int:
    """The trainer's own statuses (bad flags, bad data, out of memory, preempted) beat the generic ones of peers
    that crashed because a rank went away; a child killed by signal N counts as 128 + N."""
    specific = [code for code in codes if code in TRAINER_STATUSES]
    failed = [code if code > 0 else 128 - code for code in codes if code != 0]
    return (specific or failed)[0]


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    """Let the others end on their own for a moment (a peer's failure usually fails them too, with their own
    message), then SIGTERM, then SIGKILL after the grace period."""
    for child in children:
        try:
            child.wait(timeout=_SETTLE_SECONDS)
        except subprocess.TimeoutExpired:
            break
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
