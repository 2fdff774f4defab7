"""The plan's lines about its image and its Reduction Server choice (in its reasons) and its network across
machines (in its assumptions).

Each says what was chosen and why, in words a reviewer can check: which image build runs the plan (and which GPUs the
run's image leaves out), the bandwidth multi-node plans assume where a GPUDirect stack cannot be set up, and whether
reducers were used and what they change in the step time.
"""

from __future__ import annotations

from functools import lru_cache

from deploy.images import trainer_image
from functions.planning.images import ImageSupport, landfall_images
from functions.planning.search import Evaluation
from functions.planning.space import VARIANT_SERVER, VARIANT_STRATEGY, Space
from schemas.gpus import sm_name
from schemas.vocabulary import STRATEGY_INDEX

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
