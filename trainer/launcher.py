"""The trainer image's entrypoint (`python -m trainer.launcher ARGS`): run this node's training processes, torchrun
style, for the built-in trainer and for a team's own script or package alike (docs/trainer-contract.md).

Vertex starts one process per replica. The launcher reads what to run (trainer/user_code.py: the built-in
`python -m trainer.task`, a script or a module), fetches and installs a team's code, stages the contract's local
paths, then starts one process per GPU (or LANDFALL_NPROC_PER_NODE on CPU; one per node with launch per-node),
giving each child torchrun's variables (global RANK = node rank x processes per node + local rank) and, unless
OMP_NUM_THREADS is set, an equal share of the CPU cores for intra-op threads (as torchrun does, so the processes do
not oversubscribe the CPU). It forwards SIGTERM/SIGINT to the children (Vertex's preemption notice, so they can
checkpoint), and when one child fails it stops the others so the replica exits non-zero instead of hanging in a
collective; when the others still run long after one ended successfully, it says which (and stops none). For a team's
code it then copies back the checkpoint folder where no mount does
(trainer/checkpoint_folder.py), classifies the failure from the exit statuses and the last stderr lines
(trainer/user_results.py), and on success copies the model folder and turns the metrics lines into metrics.json.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO

from schemas.trainer_failure import TrainerFailure
from trainer.distributed import NodeTopology, child_environ, free_port
from trainer.errors import TRAINER_STATUSES
from trainer.failure import record_failure
from trainer.logs import log
from trainer.user_code import UserCode

BUILTIN_COMMAND = ("-m", "trainer.task")
"""The built-in trainer, run by the same interpreter as the launcher."""
STDERR_TAIL_LINES = 200
"""stderr lines kept per node for classifying a failure (every line is also passed through)."""

_SETTLE_SECONDS = 5.0
"""How long the others may take to fail by themselves after one process failed."""
_GRACE_SECONDS = 15.0
"""How long the others get to exit after one process failed, before SIGKILL."""
LINGER_NOTICE_SECONDS = 300.0
"""How long the others may run on after one process ended successfully before the launcher says which still run. It
only says so: process 0 may rightly work on alone (an evaluation, an upload), so nothing is stopped."""


class NodeRun:
    """This node's processes once run: their exit codes, the last stderr lines, whether SIGTERM arrived."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.signalled: int | None = None
        self._lock = threading.Lock()

    def keep(self, stream: IO[bytes]) -> None:
        """Pass a child's stderr through line by line, keeping the last lines."""
        for raw in iter(stream.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
            with self._lock:
                self.stderr_tail.append(raw.decode("utf-8", errors="replace"))
        stream.close()


def run_node(
    topology: NodeTopology,
    argv: list[str],
    environ: Mapping[str, str],
    command: Sequence[str] = (sys.executable, *BUILTIN_COMMAND),
    result: NodeRun | None = None,
) -> int:
    """Run this node's processes (`command ARGV` each) to completion; returns the exit status the replica should end
    with. With `result` the children's stderr is passed through and its last lines kept there."""
    if topology.num_nodes == 1:
        master_addr, master_port = "127.0.0.1", topology.master_port or free_port()
    else:
        assert topology.master_addr is not None and topology.master_port is not None
        master_addr, master_port = topology.master_addr, topology.master_port
    children: list[subprocess.Popen[bytes]] = []
    threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // topology.nproc_per_node))}
    readers: list[threading.Thread] = []
    for local_rank in range(topology.nproc_per_node):
        env = {**threads, **environ, **child_environ(topology, local_rank, master_addr, master_port)}
        child = subprocess.Popen([*command, *argv], env=env, stderr=subprocess.PIPE if result else None)
        children.append(child)
        if result is not None and child.stderr is not None:
            readers.append(threading.Thread(target=result.keep, args=(child.stderr,), daemon=True))
            readers[-1].start()
    log(
        "node started its processes",
        node_rank=topology.node_rank,
        nproc_per_node=topology.nproc_per_node,
        world_size=topology.world_size,
        pids=[c.pid for c in children],
    )

    def forward(signum: int, _frame: object) -> None:
        if result is not None:
            result.signalled = signum
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _wait_all(children, environ)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for reader in readers:
            reader.join(timeout=_GRACE_SECONDS)
        if result is not None:
            result.codes = [c.returncode for c in children if c.returncode is not None]


def per_node(topology: NodeTopology) -> NodeTopology:
    """The topology for launch per-node: one process on each node (the code starts its own workers)."""
    return replace(topology, nproc_per_node=1)


def _wait_all(children: list[subprocess.Popen[bytes]], environ: Mapping[str, str]) -> int:
    """Wait for every child; at the first failure stop the rest. Returns the status that explains the failure."""
    by_pid = {child.pid: child for child in children}
    notice: threading.Timer | None = None
    try:
        while by_pid:
            pid, raw = os.wait()
            child = by_pid.pop(pid, None)
            if child is None:
                continue
            child.returncode = os.waitstatus_to_exitcode(raw)
            if child.returncode == 0 and by_pid and notice is None:
                notice = threading.Timer(LINGER_NOTICE_SECONDS, _say_who_lingers, (by_pid, pid))
                notice.daemon = True
                notice.start()
            if child.returncode != 0:
                return _failed(child, children, by_pid, environ)
        return 0
    finally:
        if notice is not None:
            notice.cancel()


def _say_who_lingers(running: Mapping[int, subprocess.Popen[bytes]], ended: int) -> None:
    """Log which processes still run LINGER_NOTICE_SECONDS after one ended successfully (read, never reaped, here)."""
    pids = sorted(running)
    if pids:
        log(
            "training processes still run long after one ended successfully",
            severity="WARNING",
            pids=pids,
            ended_pid=ended,
            after_seconds=LINGER_NOTICE_SECONDS,
            hint=(
                "if they should have ended, one may hang while leaving its process group: a DDP model must be freed "
                "before dist.destroy_process_group() (docs/trainer-contract.md, Checkpoints)"
            ),
        )


def _failed(
    child: subprocess.Popen[bytes],
    children: list[subprocess.Popen[bytes]],
    by_pid: dict[int, subprocess.Popen[bytes]],
    environ: Mapping[str, str],
) -> int:
    """One process failed: say so, record a kill, stop the rest; the status that explains the failure."""
    pid = child.pid
    hint = (
        ("killed by SIGKILL: most often the host ran out of memory (lower --batch-size or use a larger machine)")
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


def _record_killed(child: subprocess.Popen[bytes], environ: Mapping[str, str]) -> None:
    signum = -(child.returncode or 0)
    name = signal.Signals(signum).name if signum in signal.valid_signals() else f"signal {signum}"
    oom = signum == signal.SIGKILL  # the kernel's OOM killer sends SIGKILL
    cause = (
        "most often the kernel's OOM killer (the host ran out of memory): lower --batch-size or use a machine with "
        "more RAM"
        if oom
        else "stopped from outside the trainer"
    )
    message = f"a training process (pid {child.pid}) was killed by {name}: {cause}"
    kind = "OutOfMemory" if oom else "Killed"
    record_failure(environ, TrainerFailure(kind=kind, message=message, exit_code=128 + signum))


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


def main(argv: list[str] | None = None) -> int:
    """The image's entrypoint: run this node's share of the job (built-in trainer or a team's code)."""
    from trainer.distributed import default_nproc_per_node, read_node_topology
    from trainer.errors import ConfigError, TrainerError
    from trainer.failure import failure_of
    from trainer.user_code import user_code_from_env

    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ)
    try:
        code = user_code_from_env(environ)
        topology = read_node_topology(environ, default_nproc_per_node(environ))
        if code.launch == "per-node":
            topology = per_node(topology)
        log(
            "launcher starting",
            trainer=code.form,
            launch=code.launch,
            node_rank=topology.node_rank,
            nodes=topology.num_nodes,
            nproc_per_node=topology.nproc_per_node,
        )
        if code.builtin:
            return _run_builtin(topology, argv, environ)
        return _run_user_code(code, topology, argv, environ)
    except TrainerError as exc:
        log(str(exc), severity="ERROR", error=type(exc).__name__, exit_code=exc.exit_code)
        kind = ConfigError.__name__ if isinstance(exc, ConfigError) else None
        record_failure(environ, failure_of(exc, exc.exit_code, environ, kind=kind))
        return exc.exit_code


def _run_builtin(topology: NodeTopology, argv: list[str], environ: Mapping[str, str]) -> int:
    """Run the built-in trainer on this node, its processes sharing one folder of the dataset's shards (downloaded
    once, read every epoch: trainer/storage.py), removed when they end; made in LANDFALL_WORK_DIR when it is set (the
    local Vertex emulator's folder for the replica's disk), else in the TMPDIR."""
    import tempfile

    from trainer.storage import DATA_CACHE_ENV

    with tempfile.TemporaryDirectory(prefix="landfall-data-", dir=environ.get("LANDFALL_WORK_DIR") or None) as folder:
        return run_node(topology, argv, {**environ, DATA_CACHE_ENV: folder})


def _run_user_code(code: UserCode, topology: NodeTopology, argv: list[str], environ: Mapping[str, str]) -> int:
    """Fetch, install and stage a team's code, run it on this node, and record what it leaves (metrics, model,
    or its classified failure)."""
    from pathlib import Path

    from schemas.canary import CANARY_ENV
    from schemas.user_metrics import METRICS_LINES_FILE, metrics_document
    from trainer import storage
    from trainer.checkpoint_folder import CHECKPOINT_DIR_ENV, resume_env, save_checkpoints, stage_checkpoints
    from trainer.cpu_rehearsal import rehearsal_env
    from trainer.user_code import (
        CHAMPION_DIR_ENV,
        GCS_MOUNT,
        environment_facts,
        fetch,
        install,
        new_workdir,
        publish_model,
        stage,
        stage_folder,
    )
    from trainer.user_results import classify_exit

    workdir = new_workdir(environ)
    script, packages = fetch(code, workdir)
    cache = Path(environ.get("LANDFALL_CODE_ENV_CACHE") or workdir / "envs")
    python = install(code, packages, cache, environ)
    environment = environment_facts(python)
    for warning in environment.get("warnings") or []:
        log(f"code environment: {warning.get('message', '')}", severity="WARNING")
    paths = stage(environ, workdir)
    checkpoints = stage_checkpoints(environ, workdir, GCS_MOUNT)
    contract = {
        "LANDFALL_DATA_DIR": paths.data_dir,
        "LANDFALL_MODEL_DIR": paths.model_dir,
        "LANDFALL_DATA_FILES": paths.data_files,
        "LANDFALL_METRICS_FILE": paths.metrics_file,
        CHECKPOINT_DIR_ENV: checkpoints.path,
        **resume_env(checkpoints),
    }
    if environ.get(CHAMPION_DIR_ENV):  # the route's production model, as a local folder like the model's
        contract[CHAMPION_DIR_ENV] = stage_folder(environ[CHAMPION_DIR_ENV], workdir / "champion", GCS_MOUNT)
    command = [python, str(script)] if script is not None else [python, "-m", code.module]
    result = NodeRun()
    status = run_node(topology, argv, {**environ, **contract, **rehearsal_env(environ)}, command=command, result=result)
    save_checkpoints(checkpoints)  # however the code ended: a failed or preempted attempt's are what a resume needs
    model_uri = environ.get("AIP_MODEL_DIR", "")
    if status == 0:
        written = publish_model(paths, model_uri) if model_uri else []
        if topology.node_rank == 0 and model_uri:
            text = Path(paths.metrics_file).read_text(errors="replace")
            document = metrics_document(text, form=code.form, world_size=topology.world_size)
            if environment:  # the requirements' installed versions, and the warnings of installing them
                document["packages"] = environment.get("packages", {})
                document["warnings"] = [*document.get("warnings", []), *environment.get("warnings", [])]
            storage.write_bytes(
                storage.join(model_uri, "metrics.json"), json.dumps(document, indent=2).encode(), "application/json"
            )
            if environ.get(CANARY_ENV) == "1":  # a canary: its lines carry the figures (docs/canary.md)
                storage.write_bytes(storage.join(model_uri, METRICS_LINES_FILE), text.encode(), "application/x-ndjson")
        log("training code succeeded", model_files=len(written))
        return 0
    if result.signalled == signal.SIGTERM:
        log("stopped by SIGTERM (Vertex's preemption notice or a cancel); no failure recorded", severity="WARNING")
        return 143
    failure = classify_exit(result.codes, list(result.stderr_tail), rank=topology.node_rank)
    log(failure.message, severity="ERROR", error=failure.kind, exit_code=failure.exit_code)
    record_failure(environ, failure)
    return status


if __name__ == "__main__":
    sys.exit(main())
