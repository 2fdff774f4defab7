"""Running the trainer as Vertex does (the image's entrypoint, `python -m trainer.launcher`, which starts `python -m
trainer.task` once per process): a subprocess with the documented flags and env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class TrainerRun:
    returncode: int
    stdout: str
    stderr: str

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records (every stdout line must be one)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def trainer_error(self) -> dict[str, Any]:
        """The training process's own error record (the launcher logs its own lines after it)."""
        return [r for r in self.records() if r.get("severity") == "ERROR" and r.get("error")][-1]

    def messages(self, message: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("message") == message]


def trainer_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CLUSTER_SPEC",
            "LANDFALL_NPROC_PER_NODE",
            "AIP_MODEL_DIR",
            "AIP_CHECKPOINT_DIR",
            "AIP_TENSORBOARD_LOG_DIR",
        )
    }
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"  # tiny models on a shared 2-core machine: threads only add contention
    env.update(extra)
    return env


def trainer_args(
    data_uri: str,
    *,
    task: str = "tabular-classification",
    model: str = "mlp-small",
    epochs: int = 2,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    seed: int = 7,
    strategy: str = "ddp",
    extra: tuple[str, ...] = (),
    adaptive: bool = False,
) -> list[str]:
    """The trainer's command line. adaptive=False trains exactly `epochs` on val_fraction's rows (the size
    adaptation of trainer/sizing.py off), so that tests of other things keep their exact step counts."""
    fixed = () if adaptive else ("--hparam", "min_steps=0", "min_held_out=0", "early_stopping_patience=0")
    return [
        f"--data-uri={data_uri}",
        f"--task={task}",
        f"--model={model}",
        f"--epochs={epochs}",
        f"--batch-size={batch_size}",
        f"--learning-rate={learning_rate}",
        f"--seed={seed}",
        f"--strategy={strategy}",
        "--precision=auto",
        *fixed,
        *extra,
    ]


def run_trainer(args: list[str], env: dict[str, str], timeout: float = 120) -> TrainerRun:
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.launcher", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return TrainerRun(proc.returncode, proc.stdout, proc.stderr)


def run_until(args: list[str], env: dict[str, str], trigger, signal_number: int, timeout: float = 120) -> TrainerRun:
    """Start the trainer, send signal_number once a log record satisfies trigger, and collect the rest.

    SIGTERM goes to the process we started, the launcher, which forwards it to its children, as Vertex's SIGTERM to
    a replica's first process does. SIGKILL goes to the whole process group, as a machine lost (or a container
    killed) takes every process of the replica with it.
    """
    import signal as _signal
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.launcher", *args],
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines: list[str] = []
    signalled = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not signalled and line.startswith("{") and trigger(json.loads(line)):
                if signal_number == _signal.SIGKILL:
                    os.killpg(proc.pid, signal_number)
                else:
                    proc.send_signal(signal_number)
                signalled = True
        stderr = proc.stderr.read() if proc.stderr else ""
        proc.wait()
    finally:
        timer.cancel()
    assert signalled, "the trigger record never appeared:\n" + "".join(lines[-20:]) + stderr[-2000:]
    return TrainerRun(proc.returncode, "".join(lines), stderr)


def same_weights(model_dir_a: Path, model_dir_b: Path) -> bool:
    """True when two model.pt files hold bit-identical tensors under the same names."""
    import torch

    a = torch.load(model_dir_a / "model.pt", weights_only=True)
    b = torch.load(model_dir_b / "model.pt", weights_only=True)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def start_processes(argv: list[str], processes: int) -> list[subprocess.Popen]:
    """argv started as `processes` ranks of one local process group (gloo on 127.0.0.1), or once on its own;
    stdout and stderr together in each Popen's stdout. finish() waits for them."""
    if processes == 1:
        return [subprocess.Popen(argv, env=trainer_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)]
    from trainer.distributed import free_port

    port = str(free_port())
    return [
        subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=trainer_env(
                RANK=str(rank),
                WORLD_SIZE=str(processes),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(processes),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            ),
        )
        for rank in range(processes)
    ]


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> None:
    """Wait for every process; all are killed if one outlives timeout; each must exit 0 (its output in the failure)."""
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        assert proc.returncode == 0, output.decode()[-3000:]
