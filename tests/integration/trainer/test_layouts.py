"""Model-parallel layouts train what data parallelism trains: on CPU with gloo, gpt-tiny under tensor parallelism
(2 processes), under a pipeline of 2 stages x 2 data-parallel replicas (4 processes, also as 2 "nodes" of 2 through
the trainer's own launcher), and under FSDP on the mesh's dp dimension, takes the same steps to the same losses and
weights as DDP with 2 processes on the same global batches; a checkpoint written under tensor parallelism resumes
under DDP (and under the pipeline) and goes on to the same losses as the uninterrupted run.

The worker (layouts_worker.py) drives the trainer's own mesh, wrapping, AdamW, clipping (grad_clip 1.0: the global
norm over shards and stages is used from the first step) and train_step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_runner import finish, run_trainer, start_processes, trainer_args, trainer_env

LOSS_RTOL = 1e-5
"""Relative, on fp32 losses near ln(256) = 5.5: the layouts sum the same products in another order (a matrix split
over processes and all-reduced, gradients summed across stages), which moves a loss by about 1e-7 relative; a
wrong split (heads mixed across processes, a gradient missed or counted twice, a norm over one stage only) moves it
by 1e-3 or more."""
WEIGHT_ATOL = 1e-4
"""Absolute, on weights of order 0.02 to 1 after 4 AdamW steps of lr 3e-3 (each step moves a weight by up to about
3e-3): AdamW divides by the root of the squared gradient, which turns float reordering in the smallest gradients
into differences of up to about 1e-5; a missed gradient moves a weight by a whole step."""


def launch(out: Path, processes: int, *args: str) -> list[subprocess.Popen]:
    argv = [sys.executable, "-m", "tests.integration.trainer.layouts_worker", "--out", str(out), *args]
    return start_processes(argv, processes)


def result(out: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    return json.loads((out / "result.json").read_text()), torch.load(out / "weights.pt", weights_only=True)


RUNS: dict[str, tuple[int, tuple[str, ...]]] = {
    "ddp x2": (2, ()),
    "tp2": (2, ("--tensor-parallel", "2")),
    "pp2 x dp2": (4, ("--pipeline-parallel", "2", "--accumulation", "2")),
    "pp2 x dp2 fsdp": (4, ("--pipeline-parallel", "2", "--accumulation", "2", "--strategy", "fsdp")),
    "tp2 x dp2 fsdp": (4, ("--tensor-parallel", "2", "--strategy", "fsdp")),
    "pp2 x tp2, 1 micro-batch": (4, ("--pipeline-parallel", "2", "--tensor-parallel", "2")),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every layout's 4 steps, and a tp2 run that stops with a checkpoint at step 2, resumed under DDP x2 and under
    pp2 x dp2 (FSDP)."""
    root = tmp_path_factory.mktemp("layouts")
    outs = {name: root / name.replace(" ", "_").replace(",", "") for name in RUNS}
    for name, (processes, args) in RUNS.items():
        finish(launch(outs[name], processes, *args))
    checkpoints = str(root / "checkpoints")
    outs["tp2 saved at 2"] = root / "saved"
    finish(launch(outs["tp2 saved at 2"], 2, "--tensor-parallel", "2", "--save-at", "2", "--checkpoints", checkpoints))
    outs["resumed ddp x2"] = root / "resumed_ddp"
    finish(launch(outs["resumed ddp x2"], 2, "--resume", "--checkpoints", checkpoints))
    outs["resumed pp2 x dp2"] = root / "resumed_pp"
    pipeline = ("--pipeline-parallel", "2", "--accumulation", "2", "--strategy", "fsdp")
    finish(launch(outs["resumed pp2 x dp2"], 4, *pipeline, "--resume", "--checkpoints", checkpoints))
    return outs


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b), sorted(set(a) ^ set(b))
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("layout", [name for name in RUNS if name != "ddp x2"])
def test_a_model_parallel_layout_trains_what_ddp_trains(runs: dict[str, Path], layout: str) -> None:
    reference, reference_weights = result(runs["ddp x2"])
    got, weights = result(runs[layout])
    processes, args = RUNS[layout]
    tp = int(args[args.index("--tensor-parallel") + 1]) if "--tensor-parallel" in args else 1
    pp = int(args[args.index("--pipeline-parallel") + 1]) if "--pipeline-parallel" in args else 1
    assert got["layout"] == {
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "data_parallel": processes // (tp * pp),
        "sequence_parallel": False,
    }
    assert got["split"]["global_batch_size"] == reference["split"]["global_batch_size"] == 8
    assert got["split"]["processes"] == processes // (tp * pp)  # the data split is over dp only
    assert len(got["losses"]) == 4
    assert got["losses"] == pytest.approx(reference["losses"], rel=LOSS_RTOL)
    assert max_difference(weights, reference_weights) < WEIGHT_ATOL
    # the whole model comes back under the unsplit names, the tied embedding once
    assert "wte.weight" in weights and "blocks.1.attn.qkv.weight" in weights and "ln_f.weight" in weights


def test_training_moves_the_weights_far_more_than_the_tolerance(runs: dict[str, Path]) -> None:
    """The layouts' agreement means something only if a step changes the loss and weights by far more."""
    reference, weights = result(runs["ddp x2"])
    torch.manual_seed(7)
    from trainer.models.factory import build_model

    initial = build_model("gpt-tiny", "causal-lm", {}, False).state_dict()
    assert max_difference(weights, {k: v for k, v in initial.items() if k in weights}) > 10 * WEIGHT_ATOL
    assert abs(reference["losses"][0] - reference["losses"][2]) > 100 * LOSS_RTOL * reference["losses"][0]


@pytest.mark.slow
@pytest.mark.parametrize("resumed", ["resumed ddp x2", "resumed pp2 x dp2"])
def test_a_tensor_parallel_checkpoint_resumes_under_another_layout(runs: dict[str, Path], resumed: str) -> None:
    uninterrupted, final = result(runs["tp2"])
    saved, _ = result(runs["tp2 saved at 2"])
    assert saved["losses"] == pytest.approx(uninterrupted["losses"][:2], rel=LOSS_RTOL)
    got, weights = result(runs[resumed])
    assert got["first_step"] == 2
    # steps 3 and 4 from the checkpoint: weights and AdamW state came back, resharded from the tp2 layout
    assert got["losses"] == pytest.approx(uninterrupted["losses"][2:], rel=LOSS_RTOL)
    assert max_difference(weights, final) < WEIGHT_ATOL


@pytest.mark.slow
def test_the_launcher_runs_a_pipeline_on_two_nodes_like_ddp(tmp_path: Path) -> None:
    """The trainer's entry point on 2 "nodes" of 2 processes (RANK = node rank, WORLD_SIZE = 2 nodes, as Vertex sets
    them): pipeline stages across the nodes, dp inside each; the same logged losses, held-out loss and model as
    DDP with 2 processes on one node."""
    from tests import datagen
    from trainer.distributed import free_port

    data = tmp_path / "data"
    data.mkdir()
    for shard in range(2):
        (data / f"part-{shard}.txt").write_text(datagen.text_corpus(300, shard))
    base = trainer_args(str(data), task="causal-lm", model="gpt-tiny", epochs=1, batch_size=8, learning_rate=3e-3)
    common = [*base, "--max-steps=4", "--gradient-accumulation-steps=2", "--hparam", "log_every=2"]
    ddp = run_trainer(common, trainer_env(LANDFALL_NPROC_PER_NODE="2", AIP_MODEL_DIR=str(tmp_path / "ddp")))
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    port = str(free_port())
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "trainer.launcher", *common, "--pipeline-parallel=2"],
            env=trainer_env(
                LANDFALL_NPROC_PER_NODE="2",
                RANK=str(node),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                AIP_MODEL_DIR=str(tmp_path / "pp"),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in range(2)
    ]
    outputs = [node.communicate(timeout=180) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(err[-2000:] for _, err in outputs)
    records = [json.loads(line) for line in outputs[0][0].splitlines() if line.startswith("{")]
    layout = [r for r in records if r.get("message") == "model layout"]
    assert layout and {k: layout[0][k] for k in ("tensor_parallel", "pipeline_parallel", "data_parallel")} == {
        "tensor_parallel": 1,
        "pipeline_parallel": 2,
        "data_parallel": 2,
    }

    def figures(recs: list[dict[str, Any]]) -> list[float]:
        return [r["loss"] for r in recs if r.get("message") in ("training", "epoch finished")]

    assert figures(records) == pytest.approx(figures(ddp.records()), rel=LOSS_RTOL)
    want = torch.load(tmp_path / "ddp" / "model.pt", weights_only=True)
    got = torch.load(tmp_path / "pp" / "model.pt", weights_only=True)
    assert max_difference(got, want) < WEIGHT_ATOL
