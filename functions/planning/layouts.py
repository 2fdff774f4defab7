"""What a model-parallel layout changes for one workload: which layouts it can run, the activations a GPU keeps, the
pipeline's micro-batches and bubble, and the traffic tensor and pipeline parallelism add to a step.

A layout is (t, p): tensor parallelism of degree t inside each machine (each block's attention heads and MLP columns
split over t GPUs on the machine's NVLink), p pipeline stages across machines (the blocks split into p stages, a 1F1B
schedule over m micro-batches per data-parallel rank), and FSDP over the remaining d = GPUs / (t x p) processes.
The formulas are functions/planning/model_parallel.py's (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et
al. 2022), written here over the search's arrays; the memory and gradient terms that do not depend on the workload
are in functions/planning/space.py.
"""

from __future__ import annotations

import numpy as np

from functions.planning.assumptions import ComputeAssumptions
from functions.planning.model_parallel import ACTIVATION_BYTES, pipeline_bubble
from functions.planning.space import DATA_VARIANTS, VARIANT_PIPELINE, VARIANT_TENSOR
from functions.planning.workload import Workload
from schemas.vocabulary import MODEL_PARALLELISM, PIPELINE_PARALLELISM, TENSOR_PARALLELISM

SEQUENCE_PARALLEL = False
"""Whether the built-in trainer's tensor parallelism also splits the layer norms and dropouts along the sequence
(Korthikanti et al. 2022). It does not (trainer/parallel.py): a tensor-parallel GPU keeps the 10 s*b*h bytes per
layer outside the attention and MLP whole, and only 24/t of the rest."""
BUBBLE_MICRO_BATCHES_PER_STAGE = 4
"""A pipeline step runs at least this many micro-batches per stage where the batch allows (m >= 4p): the 1F1B
bubble (p-1)/(m+p-1) stays under 20 %; else at least one per stage (m >= p) where it allows that."""


def supported(work: Workload) -> np.ndarray:
    """[variant] whether the workload can run each variant: every data-parallel one; a layout only for a transformer
    (its heads divisible by t, at least p blocks) whose trainer says it splits that way (Workload.parallelism: the
    built-in trainer does both; a team's code only what its workload.parallelism lists) and whose memory and step
    were not measured per data-parallel process (a whole model's figures say nothing of a split one's)."""
    out = np.zeros(len(VARIANT_TENSOR), dtype=bool)
    out[:DATA_VARIANTS] = True
    measured = work.measured_memory_bytes > 0 or work.measured_step_seconds > 0
    if work.family != "gpt" or not work.n_layer or not work.n_head or measured:
        return out
    t, p = VARIANT_TENSOR, VARIANT_PIPELINE
    ok = (work.n_head % t == 0) & (p <= work.n_layer)
    if TENSOR_PARALLELISM not in work.parallelism:
        ok &= t == 1
    if PIPELINE_PARALLELISM not in work.parallelism:
        ok &= p == 1
    out[DATA_VARIANTS:] = ok[DATA_VARIANTS:]
    return out


def unsupported_text(work: Workload, tensor: int, pipeline: int) -> str:
    """Why the workload cannot run layout (tensor, pipeline); "" when it can."""
    if work.family != "gpt" or not work.n_layer or not work.n_head:
        return "model parallelism splits transformer blocks: this model has none the planner knows of"
    if work.measured_memory_bytes > 0 or work.measured_step_seconds > 0:
        return (
            "model parallelism not weighed: the memory and step time given (workload.memory_gib_per_gpu, "
            "step_seconds) are a whole model's on one GPU"
        )
    missing = [
        kind
        for kind, degree in ((TENSOR_PARALLELISM, tensor), (PIPELINE_PARALLELISM, pipeline))
        if degree > 1 and kind not in work.parallelism
    ]
    if missing:
        return (
            f"the trainer does not declare {' or '.join(missing)} parallelism "
            f"(workload.parallelism lists what it supports: {', '.join(MODEL_PARALLELISM)})"
        )
    if work.n_head % tensor:
        return f"tensor parallel {tensor} needs the heads ({work.n_head}) divisible by {tensor}"
    if pipeline > work.n_layer:
        return f"{pipeline} pipeline stages need at least {pipeline} blocks (the model has {work.n_layer})"
    return ""


def fp16_text(gpu: str) -> str:
    """Why a layout is not planned on a GPU that trains in fp16."""
    return (
        f"{gpu} has no bf16, and the trainer's model-parallel layouts take no fp16 loss scaling: they are planned on "
        "GPUs with bf16 (A100, H100, L4 and later)"
    )


def _block_share(tensor: np.ndarray) -> np.ndarray:
    """Share of a block's activations one GPU keeps under tensor parallelism t (Korthikanti et al. 2022, Table 2,
    without the attention scores: the trainer's attention kernel does not keep them): 34/t with sequence
    parallelism, else (10 + 24/t)/34."""
    if SEQUENCE_PARALLEL:
        return 1.0 / tensor
    share: np.ndarray = (10.0 + 24.0 / tensor) / 34.0
    return share


def activation_shares(work: Workload, variants: int, kept_per_token_per_hidden: float) -> tuple[np.ndarray, np.ndarray]:
    """[variant] the share of a sample's activations (without, with activation checkpointing) one GPU keeps under
    each variant. The blocks' part splits by t (_block_share); the embeddings and logits stay whole. A pipeline's
    first stage keeps its L/p blocks for p micro-batches in flight (1F1B with m >= p): as many block activations as
    one micro-batch of every block, so p does not change the share."""
    t = VARIANT_TENSOR[:variants].astype(np.float64)
    full = work.activation_bytes_per_sample
    if full <= 0 or work.family != "gpt" or variants <= DATA_VARIANTS:
        return np.ones(variants), np.ones(variants)
    hidden_tokens = float(work.seq_len * work.d_model)
    blocks = min(full, full if work.activations_at_run_precision else hidden_tokens * work.n_layer * 34.0)
    share = (blocks * _block_share(t) + (full - blocks)) / full
    checkpointed = work.checkpointed_activation_bytes_per_sample
    if checkpointed <= 0:
        return share, np.ones(variants)
    kept = min(checkpointed, hidden_tokens * work.n_layer * kept_per_token_per_hidden)
    inputs = kept / t if SEQUENCE_PARALLEL else np.full(variants, kept)
    recomputed = min(checkpointed - kept, hidden_tokens * 34.0)
    rest = checkpointed - kept - recomputed
    return share, (inputs + recomputed * _block_share(t) + rest) / checkpointed


def pipeline_room(room: np.ndarray, per_process: np.ndarray, variants: int) -> np.ndarray:
    """The micro-batch room of each pipeline variant capped so that its m = per_process / micro micro-batches keep
    the bubble small (BUBBLE_MICRO_BATCHES_PER_STAGE), where its share of the batch allows; [variant, config]."""
    rows = np.flatnonzero(VARIANT_PIPELINE[:variants] > 1)
    if not rows.size:
        return room
    p = VARIANT_PIPELINE[rows, None]
    share = per_process[rows]
    target = share // (BUBBLE_MICRO_BATCHES_PER_STAGE * p)
    out = room.copy()
    out[rows] = np.minimum(room[rows], np.where(target >= 1, target, np.maximum(share // p, 1)))
    return out


def bubble(accumulation: np.ndarray, variants: int) -> np.ndarray:
    """[variant, config] the 1F1B bubble's share of each step, (p-1)/(m+p-1) (0 without a pipeline)."""
    p = VARIANT_PIPELINE[:variants, None]
    out: np.ndarray = (p - 1) / (np.maximum(accumulation, 1) + p - 1)
    return out


def model_parallel_seconds(
    work: Workload,
    micro: np.ndarray,
    accumulation: np.ndarray,
    activation_factor: np.ndarray,
    gpus_per_node: np.ndarray,
    intra_bytes_per_s: np.ndarray,
    network_bytes_per_s: np.ndarray,
    step_overhead: np.ndarray,
    compute: ComputeAssumptions,
    variants: int,
) -> np.ndarray:
    """[variant, config] seconds per step a layout adds beyond its compute and its gradients, none of it hidden:
    tensor parallelism's four all-reduces of s*b*h activations per block and micro-batch over NVLink (Shoeybi et al.
    2019), for the stage's L/p blocks, each also paying a collective's latency; a pipeline's s*b*h activations forward
    and their gradients back per micro-batch across each stage boundary, for every one of the machine's gpus/t
    data-parallel ranks over its NIC, each send paying the network's latency (Narayanan et al. 2021); and the p - 1
    extra micro-steps of a 1F1B step (m + p - 1 in all), each with the per-micro-step overhead."""
    out = np.zeros(micro.shape)
    if variants <= DATA_VARIANTS:
        return out
    rows = slice(DATA_VARIANTS, variants)  # the data-parallel variants add nothing
    t = VARIANT_TENSOR[rows, None].astype(np.float64)
    p = VARIANT_PIPELINE[rows, None]
    m = accumulation[rows]
    sbh = (float(work.seq_len * work.d_model) * ACTIVATION_BYTES) * micro[rows] * activation_factor  # per micro-batch
    blocks = -(-work.n_layer // p)
    reduces = np.where(t > 1, blocks * 4, 0) * m
    tensor = reduces * ((2 * (t - 1) / t) * sbh / intra_bytes_per_s + compute.intra_latency_seconds)
    ranks = np.maximum(gpus_per_node / t, 1.0)
    sends = np.where(p > 1, 2, 0) * m
    boundary = sends * (ranks * sbh / network_bytes_per_s + compute.network_latency_seconds)
    out[rows] = tensor + boundary + (p - 1) * step_overhead
    return out


__all__ = [
    "BUBBLE_MICRO_BATCHES_PER_STAGE",
    "SEQUENCE_PARALLEL",
    "activation_shares",
    "bubble",
    "model_parallel_seconds",
    "pipeline_bubble",
    "pipeline_room",
    "supported",
    "unsupported_text",
]
