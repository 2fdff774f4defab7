"""The plan's lines about its image and its Reduction Server choice (in its reasons) and its network across
machines (in its assumptions).

Each says what was chosen and why, in words a reviewer can check: which image build runs the plan (and which GPUs the
run's image leaves out), the bandwidth multi-node plans assume where a GPUDirect stack cannot be set up, and whether
reducers were used and what they change in the step time.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from deploy.images import trainer_image
from functions.planning.explain import reason_text
from functions.planning.images import ImageSupport, landfall_images
from functions.planning.layouts import unsupported_text
from functions.planning.search import Evaluation
from functions.planning.space import (
    DATA_VARIANTS,
    VARIANT_PIPELINE,
    VARIANT_SERVER,
    VARIANT_STRATEGY,
    VARIANT_TENSOR,
    Space,
)
from schemas.gpus import sm_name
from schemas.vocabulary import STRATEGIES, STRATEGY_INDEX, STRATEGY_TITLES

_DDP = STRATEGY_INDEX["ddp"]


def image_note(ev: Evaluation, c: int) -> str:
    """Which image runs the plan; for a team's image, also what it was assumed to carry and the GPUs it leaves out."""
    return _image_note(ev.space, ev.limits.image, c)


@lru_cache(maxsize=4096)
def _image_note(space: Space, image: ImageSupport, c: int) -> str:
    shape = space.configs[c].shape
    if image == landfall_images():
        capability = space.catalog.gpus[shape.gpu_kind].compute_capability if not shape.is_cpu_only else ""
        build = trainer_image().build_for(capability) if capability else trainer_image().builds[0]
        if build is None:  # the planner filtered such GPUs out; kept total for the type checker
            return image.describe()
        for_gpu = f", the build with kernels for {sm_name(capability)}" if capability else ""
        plugin = "with" if build.reduction_server else "without"
        return f"image: {build.describe()}{for_gpu}; {plugin} Google's Reduction Server NCCL plugin"
    left_out = sorted(
        {
            f"{gpu.display} ({sm_name(gpu.compute_capability)})"
            for kind, gpu in space.catalog.gpus.items()
            if kind in space.kinds and not image.supports(gpu.compute_capability)
        }
    )
    gaps = f"; not planned on {', '.join(left_out)}: {image.label} has no kernels for them" if left_out else ""
    return image.describe() + gaps


def network_note(ev: Evaluation, c: int) -> str | None:
    """The bandwidth a multi-node plan assumes where the shape's GPUDirect stack cannot be set up; None otherwise."""
    cfg = ev.space.configs[c]
    return cfg.shape.network_note or None if cfg.nodes > 1 else None


def reducer_note(ev: Evaluation, c: int, v: int, s: int) -> str | None:
    """Why the plan uses Reduction Server or not (multi-node GPU plans only)."""
    space = ev.space
    cfg = space.configs[c]
    if cfg.nodes < 2 or cfg.shape.is_cpu_only:
        return None
    a = space.catalog.assumptions.reduction_server
    servers = int(space.server_replicas[c])
    sizing = (
        f"{servers} x {a.machine_type} (~{a.bandwidth_gbps:g} Gbps each, enough to match the {cfg.nodes} workers' "
        f"{cfg.nodes} x {cfg.shape.network_gbps:g} Gbps, Google's sizing rule)"
    )
    if VARIANT_SERVER[v]:
        plain = int(v) - 1  # the DDP variant without reducers comes just before it (space.VARIANTS)
        return (
            f"Reduction Server: {sizing}; each worker sends its gradients once instead of a ring's "
            f"2(n-1)/n: step {ev.step[c, plain]:.4g} s -> {ev.step[c, v]:.4g} s"
        )
    if not ev.limits.image.reduction_server:
        return f"Reduction Server: not used: {ev.limits.image.label} is not known to have Google's NCCL plugin"
    if cfg.nodes == 2:
        return "Reduction Server: not used: with 2 machines a ring all-reduce already sends each gradient once"
    if int(VARIANT_STRATEGY[v]) != _DDP:
        return "Reduction Server: not used: it speeds up DDP's all-reduce; this plan shards its model states"
    server_v = int(v) + 1
    if ev.reason[c, server_v, s] != 0:
        return f"Reduction Server: not used: {sizing} would not fit the request's limits"
    return (
        f"Reduction Server: not used: {sizing} would take the step from {ev.step[c, v]:.4g} s to "
        f"{ev.step[c, server_v]:.4g} s but cost {ev.cost[c, server_v, s] - ev.cost[c, v, s]:+,.2f} USD over the run"
    )


def _layout_name(ev: Evaluation, c: int, v: int) -> str:
    t, p = int(VARIANT_TENSOR[v]), int(VARIANT_PIPELINE[v])
    data = int(ev.space.world[c]) // (t * p)
    parts = [f"tensor parallel {t} inside each machine"] if t > 1 else []
    if p > 1:
        parts.append(f"{p} pipeline stages across machines")
    strategy = STRATEGY_TITLES[STRATEGIES[int(VARIANT_STRATEGY[v])]]
    if not parts:
        return f"{strategy} over all {data} GPU{'s' if data > 1 else ''}"
    return f"{' x '.join(parts)}, {strategy} over {data} data-parallel process{'es' if data > 1 else ''}"


def _step_terms(ev: Evaluation, c: int, v: int) -> str:
    """The step of (c, v) as the sum the time model made: compute (with the pipeline's bubble), the layout's own
    traffic, the data dimension's exposed gradient traffic and the per-micro-step overhead."""
    space, work = ev.space, ev.workload
    a = space.catalog.assumptions.compute
    mode = space.modes["fp32" if ev.limits.fp32_only else "auto"]
    step = float(ev.step[c, v])
    gradients = (1.0 - a.comm_overlap_fraction) * work.trained * float(mode.comm_seconds_per_param[v, c])
    traffic = float(ev.layout_seconds[c, v])
    overhead = float(space.step_overhead[c]) * int(ev.accumulation[c, v])
    compute = step - gradients - traffic - overhead
    terms = [f"compute {compute:.3g} s"]
    if VARIANT_PIPELINE[v] > 1:
        terms[0] += f" (a {float(ev.bubble[c, v]):.0%} 1F1B bubble at {int(ev.accumulation[c, v])} micro-batches)"
    if traffic > 0:
        kinds = " and ".join(
            k
            for k, on in (("tensor all-reduces", VARIANT_TENSOR[v] > 1), ("stage sends", VARIANT_PIPELINE[v] > 1))
            if on
        )
        terms.append(f"{kinds} {traffic:.3g} s")
    if gradients > 0:
        terms.append(f"gradient traffic {gradients:.3g} s not hidden")
    return f"step {step:.4g} s = " + " + ".join(terms)


def layout_note(ev: Evaluation, c: int, v: int, s: int) -> str | None:
    """Why the plan splits the model the way it does (tensor parallelism, pipeline stages) or not, with each step's
    arithmetic against the best of the other kind on the same GPUs; None where no layout exists there (one GPU,
    or a model with no transformer blocks)."""
    space, work = ev.space, ev.workload
    layouts_here = space.variant_valid[c, DATA_VARIANTS:]
    if space.is_cpu[c] or not layouts_here.any() or work.family != "gpt":
        return None
    if ev.variants <= DATA_VARIANTS:
        pinned = ev.limits.tensor_parallel == 1 and ev.limits.pipeline_parallel == 1
        why = "constraints.tensor_parallel and pipeline_parallel pin 1" if pinned else unsupported_text(work, 2, 2)
        return f"layout: data parallel only: {why or 'no model-parallel layout applies'}"
    primary = ev.primary[c, :, s]
    data_v = int(np.argmin(primary[:DATA_VARIANTS]))
    layout_v = DATA_VARIANTS + int(np.argmin(primary[DATA_VARIANTS:]))
    chosen = _layout_name(ev, c, v)
    if v >= DATA_VARIANTS:
        other = data_v
        if ev.reason[c, other, s]:
            against = f"{_layout_name(ev, c, other)} does not do: {reason_text(ev, c, other, s, None)}"
        else:
            against = f"{_layout_name(ev, c, other)}: {_step_terms(ev, c, other)}"
        return f"layout: {chosen}: {_step_terms(ev, c, v)}; against {against}"
    if ev.reason[c, layout_v, s]:
        return (
            f"layout: {chosen}, no model parallelism: the nearest layout, {_layout_name(ev, c, layout_v)}, does not "
            f"do: {reason_text(ev, c, layout_v, s, None)}"
        )
    return (
        f"layout: {chosen}, no model parallelism: {_step_terms(ev, c, v)}; the best layout on these GPUs, "
        f"{_layout_name(ev, c, layout_v)}: {_step_terms(ev, c, layout_v)}"
    )
