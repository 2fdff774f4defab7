"""The arithmetic of model parallelism for a GPT-style transformer: what tensor parallelism inside a machine and
pipeline stages across machines hold and move, per GPU. Pure numbers, no search: the planner's layouts are built on
these (docs/planning.md, "Model parallelism").

Notation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, section 4): s sequence length, b micro-batch size, h hidden size, a attention heads, L layers,
t tensor-parallel degree, p pipeline stages, m micro-batches per pipeline step (per data-parallel rank). Activations
are 16-bit.

- Activation memory of one transformer layer, in bytes (Korthikanti et al. 2022, Table 2):
  no parallelism             s*b*h*(34 + 5*a*s/h)
  tensor parallel            s*b*h*(10 + 24/t + 5*a*s/(h*t))
  tensor + sequence parallel s*b*h*(34/t + 5*a*s/(h*t))
  selective recomputation    s*b*h*(10 + 24/t), or s*b*h*34/t with sequence parallelism (the attention's
                             softmax, its dropout and the attention over values, 5*a*s/h, are recomputed)
  full recomputation         2*s*b*h (only each layer's input is kept: the Megatron-LM practice)
  Tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", arXiv:1909.08053) splits each layer's attention heads and
  MLP columns over t GPUs; the layer norms and dropouts outside them stay whole unless sequence parallelism splits
  them along the sequence.
- Tensor parallelism's communication (Shoeybi et al. 2019, section 3): two all-reduces of the layer's s*b*h
  activations in the forward pass and two in the backward pass, per layer and micro-batch; with sequence
  parallelism the same volume as all-gathers and reduce-scatters (Korthikanti et al. 2022, section 4.2.2).
- Pipeline parallelism with the 1F1B schedule (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", arXiv:2104.04473, section 2.2): the bubble is (p-1)/(m+p-1) of the step, the
  first stage holds the activations of min(p, m) micro-batches in flight, and each stage boundary sends s*b*h
  activations forward and their gradients back per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATION_BYTES = 2
"""16-bit activations, as the formulas count them."""
RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class LayerShape:
    """One transformer layer's activation shape for one micro-batch."""

    seq_len: int
    micro_batch: int
    hidden: int
    heads: int

    @property
    def sbh(self) -> int:
        return self.seq_len * self.micro_batch * self.hidden

    @property
    def attention_ratio(self) -> float:
        """5*a*s/h: the attention's score-sized activations per s*b*h."""
        return 5 * self.heads * self.seq_len / self.hidden


def activation_bytes_per_layer(
    shape: LayerShape, tensor_parallel: int = 1, sequence_parallel: bool = False, recompute: str = "none"
) -> float:
    """Bytes of activations one GPU keeps for one layer and one micro-batch (Korthikanti et al. 2022, Table 2)."""
    t = tensor_parallel
    if t < 1:
        raise ValueError(f"tensor_parallel must be >= 1, got {t}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    if recompute == "full":
        return 2.0 * shape.sbh
    attention = 0.0 if recompute == "selective" else shape.attention_ratio / t
    if sequence_parallel:
        return shape.sbh * (34.0 / t + attention)
    if t == 1:
        return shape.sbh * (34.0 + attention)
    return shape.sbh * (10.0 + 24.0 / t + attention)


def pipeline_bubble(stages: int, micro_batches: int) -> float:
    """The share of a 1F1B pipeline step its GPUs idle: (p-1)/(m+p-1) (Narayanan et al. 2021, section 2.2.1)."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"stages and micro_batches must be >= 1, got {stages} and {micro_batches}")
    return (stages - 1) / (micro_batches + stages - 1)


def in_flight_micro_batches(stages: int, micro_batches: int) -> int:
    """Micro-batches whose activations the first stage holds at once under 1F1B: min(p, m)."""
    return min(stages, micro_batches)


def stage_activation_bytes(
    shape: LayerShape,
    layers: int,
    stages: int,
    micro_batches: int,
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Activation bytes on a GPU of the first (fullest) stage: its layers/p layers for min(p, m) micro-batches."""
    per_stage = -(-layers // stages)
    per_layer = activation_bytes_per_layer(shape, tensor_parallel, sequence_parallel, recompute)
    return per_stage * per_layer * in_flight_micro_batches(stages, micro_batches)


def tensor_parallel_bytes_per_layer(shape: LayerShape, tensor_parallel: int) -> float:
    """Bytes one GPU sends for tensor parallelism per layer and micro-batch, forward and backward: four ring
    all-reduces of s*b*h 16-bit values, each moving 2(t-1)/t of them (0 when t == 1)."""
    t = tensor_parallel
    if t == 1:
        return 0.0
    return 4 * 2 * (t - 1) / t * shape.sbh * ACTIVATION_BYTES


def pipeline_bytes_per_micro_batch(shape: LayerShape) -> float:
    """Bytes one stage boundary carries per micro-batch: its activations forward and their gradients back."""
    return 2.0 * shape.sbh * ACTIVATION_BYTES


def state_bytes_per_gpu(parameters: int, bytes_per_parameter: float, tensor_parallel: int, stages: int) -> float:
    """Weights, gradients and optimizer state one GPU holds when tensor parallelism splits each layer t ways and the
    pipeline splits the layers p ways (before any sharding over the data-parallel dimension)."""
    return parameters * bytes_per_parameter / (tensor_parallel * stages)


__all__ = [
    "ACTIVATION_BYTES",
    "RECOMPUTE_MODES",
    "LayerShape",
    "activation_bytes_per_layer",
    "in_flight_micro_batches",
    "pipeline_bubble",
    "pipeline_bytes_per_micro_batch",
    "stage_activation_bytes",
    "state_bytes_per_gpu",
    "tensor_parallel_bytes_per_layer",
]
