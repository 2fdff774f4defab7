"""The workload: a PlanInput turned into the numbers the model needs (parameters, FLOPs and activations per
sample, samples, steps), whatever the hardware.

A sample is one table row (tabular) or one sequence of seq_len tokens (causal-lm); batch_size counts samples.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from functions.planning.assumptions import Assumptions
from functions.planning.errors import PlanInputError
from functions.planning.inputs import PlanInput
from functions.planning.measured import Calibration
from schemas.errors import SchemaError
from schemas.model_presets import GptPreset, MlpPreset, get_preset


@dataclass(frozen=True)
class Workload:
    """What one training run asks of the hardware."""

    family: str
    """"gpt" or "mlp"."""
    description: str
    parameters: int
    flops_per_sample: float
    """Model FLOPs for forward + backward of one sample (PaLM appendix B for transformers, 6P for an MLP)."""
    activation_bytes_per_sample: float
    """With 16-bit activations; fp32 doubles it."""
    checkpointed_activation_bytes_per_sample: float
    """The same with activation checkpointing per transformer block; 0 where the model has no blocks (MLP)."""
    largest_layer_parameters: int
    """The biggest unit FSDP gathers at once."""
    samples_per_epoch: int
    global_batch: int
    steps: int
    tokens_per_sample: int
    n_layer: int = 0
    d_model: int = 0
    n_head: int = 0
    seq_len: int = 0
    measured_memory_bytes: float = 0.0
    """Measured bytes one process needs (an own trainer's workload.memory_gib_per_gpu); 0 = the memory model."""
    measured_step_seconds: float = 0.0
    """Measured seconds per optimizer step of the global batch on one GPU; 0 = the time model."""
    modelled_steps: int = 0
    """The model's step count where measured figures changed `steps` (calibration.py); 0 = `steps` is the model's."""
    calibration: Calibration | None = None
    """Step times and start-ups measured by past runs and canaries (functions/planning/calibration.py); None = the
    model's."""


def _generic_gpt_shape(parameters: int) -> tuple[int, int, int]:
    """A GPT-3-like shape for a bare parameter count: d_model = 128 x n_layer, 128-wide heads."""
    n_layer = max(1, round((parameters / (12 * 128 * 128)) ** (1 / 3)))
    d_model = max(128, 128 * round(math.sqrt(parameters / (12 * n_layer)) / 128))
    return n_layer, d_model, d_model // 128


def _steps(samples: int, batch: int, epochs: int, max_steps: int, min_steps: int = 0) -> int:
    """Optimizer steps: whole epochs, raised (in whole epochs) to min_steps as the built-in trainer does
    (trainer/sizing.py planned_steps), capped by max_steps."""
    per_epoch = max(1, math.ceil(samples / batch))
    steps = per_epoch * max(epochs, math.ceil(min_steps / per_epoch))
    return min(steps, max_steps) if max_steps else steps


def _gpt(inp: PlanInput, a: Assumptions, preset: GptPreset | None) -> Workload:
    if preset is not None:
        n_layer, d_model, n_head, vocab = preset.n_layer, preset.d_model, preset.n_head, preset.vocab_size
        seq_len = inp.seq_len or preset.seq_len
        parameters = inp.parameters or preset.parameter_count()
        name = preset.name
    else:
        assert inp.parameters is not None
        n_layer, d_model, n_head = _generic_gpt_shape(inp.parameters)
        if inp.layers:
            n_layer = inp.layers
        if inp.hidden_size:
            d_model, n_head = inp.hidden_size, max(1, inp.hidden_size // 128)
        vocab, seq_len, parameters, name = 256, inp.seq_len or 2048, inp.parameters, "generic transformer"
    non_embedding = n_layer * (12 * d_model * d_model + 13 * d_model)
    if inp.parameters:
        non_embedding = max(1, inp.parameters - vocab * d_model - seq_len * d_model)
    per_token = 6 * (non_embedding + d_model * vocab) + 12 * n_layer * d_model * seq_len
    act = a.memory.transformer_activation_bytes_per_token_per_hidden
    activation = seq_len * (n_layer * act * d_model + 10 * vocab + 4 * d_model)
    # Checkpointed: every block keeps its input; the one block being recomputed holds its full activations.
    kept = a.memory.checkpoint_kept_bytes_per_token_per_hidden
    checkpointed = seq_len * (n_layer * kept * d_model + act * d_model + 10 * vocab + 4 * d_model)
    tokens = inp.tokens or max(1, round(inp.dataset_bytes * a.tokens_per_byte))
    samples = inp.samples or max(1, math.ceil(tokens / seq_len))
    return Workload(
        family="gpt",
        description=f"{name}: {parameters / 1e6:,.0f}M parameters, {n_layer} layers x {d_model}, "
        f"{n_head} heads, sequence {seq_len}",
        parameters=parameters,
        flops_per_sample=float(per_token * seq_len),
        activation_bytes_per_sample=activation,
        checkpointed_activation_bytes_per_sample=float(min(checkpointed, activation)),
        largest_layer_parameters=max(12 * d_model * d_model + 13 * d_model, vocab * d_model),
        samples_per_epoch=samples,
        global_batch=inp.batch_size,
        steps=_steps(samples, inp.batch_size, inp.epochs, inp.max_steps),
        tokens_per_sample=seq_len,
        n_layer=n_layer,
        d_model=d_model,
        n_head=n_head,
        seq_len=seq_len,
    )


def _mlp(inp: PlanInput, a: Assumptions, preset: MlpPreset | None) -> Workload:
    features = inp.n_features or a.tabular.default_features
    outputs = inp.n_outputs or (1 if inp.task == "tabular-regression" else a.tabular.default_outputs)
    hidden = preset.hidden_sizes if preset is not None else ()
    widths = [features, *hidden, outputs]
    parameters = inp.parameters or sum(x * y + y for x, y in itertools.pairwise(widths))
    largest = max(x * y + y for x, y in itertools.pairwise(widths))
    rows = inp.samples or max(1, inp.dataset_bytes // ((features + 1) * a.tabular.bytes_per_value))
    name = preset.name if preset is not None else "generic MLP"
    return Workload(
        family="mlp",
        description=f"{name}: {parameters:,} parameters, widths {'-'.join(map(str, widths))}",
        parameters=parameters,
        flops_per_sample=6.0 * parameters,
        activation_bytes_per_sample=float(a.memory.mlp_activation_copies * sum(widths) * 2),
        checkpointed_activation_bytes_per_sample=0.0,
        largest_layer_parameters=min(largest, parameters),
        samples_per_epoch=rows,
        global_batch=inp.batch_size,
        steps=_steps(rows, inp.batch_size, inp.epochs, inp.max_steps, inp.min_steps),
        tokens_per_sample=1,
    )


def build_workload(inp: PlanInput, assumptions: Assumptions) -> Workload:
    """Resolve the preset and size the work; an unknown preset or a preset of the wrong family is a PlanInputError.
    An own trainer's measured memory and step time ride along (functions/planning/search.py applies them) and its
    basis leads the description, so `landfall plan` says how the size was known."""
    work = _build_workload(inp, assumptions)
    if not inp.basis:
        return work
    measured = f"; measured {inp.memory_gib_per_gpu:g} GiB/GPU, {inp.step_seconds:g} s/step" if inp.step_seconds else ""
    return replace(
        work,
        description=f"own code sized by {inp.basis}: {work.description}{measured}",
        measured_memory_bytes=inp.memory_gib_per_gpu * 2**30,
        measured_step_seconds=inp.step_seconds,
    )


def _build_workload(inp: PlanInput, assumptions: Assumptions) -> Workload:
    preset = None
    if inp.preset:
        try:
            preset = get_preset(inp.preset)
        except SchemaError as exc:
            raise PlanInputError(str(exc)) from exc
    if inp.task == "causal-lm":
        if preset is not None and not isinstance(preset, GptPreset):
            raise PlanInputError(f"task causal-lm needs a GPT preset; {inp.preset!r} is an MLP (use gpt-*)")
        return _gpt(inp, assumptions, preset)
    if preset is not None and not isinstance(preset, MlpPreset):
        raise PlanInputError(f"task {inp.task} needs an MLP preset; {inp.preset!r} is a GPT (use mlp-*)")
    return _mlp(inp, assumptions, preset)
