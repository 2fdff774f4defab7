"""Running `python -m trainer.task` as a user (or Vertex) would: a subprocess with the documented flags and env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass
class TrainerRun:
    returncode: int
    stdout: str
    stderr: str

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records (every stdout line must be one)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def messages(self, message: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("message") == message]


def trainer_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CLUSTER_SPEC",
                        "LANDFALL_NPROC_PER_NODE", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def trainer_args(data_uri: str, *, task: str = "tabular-classification", model: str = "mlp-small", epochs: int = 2,
                 batch_size: int = 32, learning_rate: float = 0.01, seed: int = 7, strategy: str = "ddp",
                 extra: tuple[str, ...] = ()) -> list[str]:
    return [f"--data-uri={data_uri}", f"--task={task}", f"--model={model}", f"--epochs={epochs}",
            f"--batch-size={batch_size}", f"--learning-rate={learning_rate}", f"--seed={seed}",
            f"--strategy={strategy}", "--precision=auto", *extra]


def run_trainer(args: list[str], env: dict[str, str], timeout: float = 120) -> TrainerRun:
    proc = subprocess.run([sys.executable, "-m", "trainer.task", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    return TrainerRun(proc.returncode, proc.stdout, proc.stderr)
