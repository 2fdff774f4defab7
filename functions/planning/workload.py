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
    trainable_parameters: int = 0
    """Parameters that train (adapters, LoRA): gradients, optimizer states and the all-reduce are sized on these,
    the frozen rest as weights at the run's precision; 0 = all `parameters` train."""
    activations_at_run_precision: bool = False
    """activation_bytes_per_sample was declared at the run's precision (workload.activation_gib_per_sample): fp32
    does not double it."""
    flops_guessed: bool = False
    """An own trainer's time rests on a model nobody described: no model.preset shape, no workload.flops_per_sample
    and no workload.step_seconds (its estimate's band is the prior's, functions/planning/bands.py)."""
    parallelism: tuple[str, ...] = ()
    """The model-parallel layouts its trainer runs (vocabulary.MODEL_PARALLELISM): both for the built-in trainer's
    transformers, what workload.parallelism lists for a team's code; () = data parallelism only."""
    sizing: tuple[str, ...] = ()
    """How an own trainer's model was sized (declared figures or the model, and why), for the plan's assumptions;
    () for Landfall's built-in trainer, whose models the planner knows."""

    @property
    def trained(self) -> int:
        """The parameters whose gradients and optimizer states the run keeps."""
        return self.trainable_parameters or self.parameters

    @property
    def frozen(self) -> int:
        """The parameters kept as weights only (0 unless trainable_parameters is given)."""
        return self.parameters - self.trained


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
        parallelism=inp.parallelism,
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
    basis leads the description, so `landfall plan` says how the size was known. Declared FLOPs, activations and
    trainable parameters replace the model's wherever they are given (a what-if plan of a preset too)."""
    work = declared(_build_workload(inp, assumptions), inp)
    if not inp.basis:
        figures = inp.flops_per_sample or inp.activation_gib_per_sample or inp.trainable_parameters
        return replace(work, sizing=sizing_lines(work, inp)) if figures else work
    if inp.step_seconds:
        measured = f"; measured {inp.memory_gib_per_gpu:g} GiB/GPU, {inp.step_seconds:g} s/step"
    elif inp.memory_gib_per_gpu:
        measured = f"; measured {inp.memory_gib_per_gpu:g} GiB/GPU"
    else:
        measured = ""
    return replace(
        work,
        description=f"own code sized by {inp.basis}: {work.description}{measured}",
        measured_memory_bytes=inp.memory_gib_per_gpu * 2**30,
        measured_step_seconds=inp.step_seconds,
        flops_guessed=not inp.preset and not inp.flops_per_sample and not inp.step_seconds,
        sizing=sizing_lines(work, inp),
    )


def declared(work: Workload, inp: PlanInput) -> Workload:
    """The modelled work with the team's declared figures in place of the model's: FLOPs per sample, activation
    memory per sample (at the run's precision, so fp32 does not double it; no checkpointing modelled for a structure
    the planner cannot see) and the trainable part of the parameters."""
    if inp.trainable_parameters and inp.trainable_parameters > work.parameters:
        raise PlanInputError(
            f"workload.trainable_parameters ({inp.trainable_parameters:,}) is more than the model's "
            f"{work.parameters:,} parameters: it counts the part that trains; give at most {work.parameters:,}"
        )
    if inp.flops_per_sample:
        work = replace(work, flops_per_sample=inp.flops_per_sample)
    if inp.flops_per_sample and inp.activation_gib_per_sample:
        work = replace(
            work,
            description=f"declared model: {work.parameters:,} parameters, {inp.flops_per_sample / 1e9:,.4g} GFLOP "
            f"and {inp.activation_gib_per_sample:.4g} GiB of activations per sample",
        )
    if inp.activation_gib_per_sample:
        work = replace(
            work,
            activation_bytes_per_sample=inp.activation_gib_per_sample * 2**30,
            checkpointed_activation_bytes_per_sample=0.0,
            activations_at_run_precision=True,
        )
    if inp.trainable_parameters and inp.trainable_parameters < work.parameters:
        work = replace(work, trainable_parameters=inp.trainable_parameters)
    return work


FAMILY_NAMES = {"gpt": "a transformer", "mlp": "an MLP"}


def sizing_lines(work: Workload, inp: PlanInput) -> tuple[str, ...]:
    """What the plan says of how an own trainer's model was sized: from the declared figures, or modelled from its
    parameters and why (the figures that would replace the model were not given)."""
    if inp.memory_gib_per_gpu and inp.step_seconds:
        measured = (
            "sizing: memory and step time measured (workload.memory_gib_per_gpu, workload.step_seconds): they replace "
            "the memory and time models"
        )
        return (measured, *frozen_line(work))
    declared_figures = {
        "flops_per_sample": (inp.flops_per_sample, f"{inp.flops_per_sample / 1e9:,.4g} GFLOP per sample"),
        "activation_gib_per_sample": (inp.activation_gib_per_sample, f"{inp.activation_gib_per_sample:.4g} GiB"),
    }
    given = [f"workload.{name} ({text})" for name, (value, text) in declared_figures.items() if value]
    missing = [name for name, (value, _) in declared_figures.items() if not value]
    line = f"sizing: from the declared {' and '.join(given)}" if given else "sizing: "
    if missing:
        modelled = {2: "FLOPs and activations", 1: "FLOPs" if not inp.flops_per_sample else "activations"}
        flops = "" if inp.flops_per_sample else f" ({work.flops_per_sample / 1e9:,.4g} GFLOP per sample)"
        line += (
            f"{'; ' if given else ''}{modelled[len(missing)]} sized as {FAMILY_NAMES[work.family]} from parameters"
            f"{flops} because {' and '.join(missing)} {'were' if len(missing) == 2 else 'was'} not given: declare "
            "them for a model that shape does not describe (CNN, ViT, diffusion, mixture of experts)"
        )
    lines = [line, *frozen_line(work)]
    if inp.memory_gib_per_gpu:
        lines.append(
            f"sizing: memory per GPU is the declared workload.memory_gib_per_gpu ({inp.memory_gib_per_gpu:g} GiB), "
            "not the memory model; time is modelled (workload.step_seconds was not given)"
        )
    return tuple(lines)


def frozen_line(work: Workload) -> tuple[str, ...]:
    """The plan's line on an adapter's or LoRA's trainable part; () when every parameter trains."""
    if not work.frozen:
        return ()
    return (
        f"sizing: {work.trained:,} trainable parameters ({work.trained / work.parameters:.2%} of "
        f"{work.parameters:,}, workload.trainable_parameters): gradients, optimizer states and the all-reduce on "
        f"those only; the {work.frozen:,} frozen as weights at the run's precision (sharded under FSDP)",
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
