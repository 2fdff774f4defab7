"""A slow, obvious reference planner for tests: loops over every (configuration, variant, spot, region) one by one,
checking each constraint straight from the PlanInput, and keeps the best. It shares the per-candidate model
(memory.py, performance.py formulas and catalog prices) with the planner, not its vectorised search, masks, batch
split or region choice, which is what it checks.

The batch split, by hand: the processes must divide the global batch; each process's share is cut into the largest
micro-batch (a divisor of the share) whose memory fits the GPU less the margin, tried without activation
checkpointing first and with it (transformers) only when no micro-batch fits without.

Model-parallel layouts (tensor parallel t inside a machine, p pipeline stages across machines, FSDP over the
d = GPUs / (t x p) data-parallel processes), by hand from model_parallel.py's per-layer formulas: each GPU keeps
1/(t x p) of the model states sharded over d; a pipeline's micro-batch is at most share / (4p) where the share
allows (else share / p); its compute waits out the 1F1B bubble; tensor all-reduces and stage sends add to the step."""

from __future__ import annotations

import math
from datetime import datetime

from functions.planning.catalog import Catalog
from functions.planning.inputs import PlanInput
from functions.planning.layouts import activation_shares
from functions.planning.memory import activation_bytes, gather_bytes, model_state_bytes, total_bytes, usable_bytes
from functions.planning.model_parallel import (
    LayerShape,
    pipeline_bubble,
    pipeline_bytes_per_micro_batch,
    tensor_parallel_bytes_per_layer,
)
from functions.planning.performance import GBIT, comm_seconds, compute_seconds, run_hours, step_seconds
from functions.planning.quotas import QuotaTable
from functions.planning.space import VARIANT_PIPELINE, VARIANT_TENSOR, VARIANTS, Space
from functions.planning.workload import Workload, build_workload
from schemas.vertex_jobs import load_vertex_jobs

_QUOTES: dict[tuple[int, str, str, bool], float] = {}


def _quote(catalog: Catalog, item: str, region: str, spot: bool) -> float:
    key = (id(catalog), item, region, spot)
    if key not in _QUOTES:
        _QUOTES[key] = catalog.prices.quote(item, region, spot).usd_per_hour
    return _QUOTES[key]


def objective_key(inp: PlanInput, hours: float, cost: float, default_value: float) -> tuple[float, float]:
    """(objective, tiebreak) by constraints.prefer, written out: fastest = hours then cost; cheapest = cost then
    hours; a value of time V (the default when unset) = cost + V x hours, then hours."""
    if inp.prefer == "fastest":
        return hours, cost
    value = 0.0 if inp.prefer == "cheapest" else float(inp.prefer) if inp.prefer else default_value
    return cost + value * hours, hours


def exhaustive_best(
    space: Space, inp: PlanInput, now: datetime, quotas: QuotaTable
) -> tuple[float, float, tuple[int, int, bool, str]] | None:
    """(objective, tiebreak, (config index, variant index, spot, region)) of the best feasible candidate."""
    catalog = space.catalog
    a = catalog.assumptions
    work = build_workload(inp, a)
    p = work.parameters
    deadline_hours = None if inp.deadline is None else (inp.deadline - now).total_seconds() / 3600
    rs = a.reduction_server
    best = None
    for ci, cfg in enumerate(space.configs):
        shape = cfg.shape
        gpu = catalog.gpus[shape.accelerator_type] if shape.accelerator_type else None
        if inp.gpu_allowlist and (gpu is None or shape.accelerator_type not in inp.gpu_allowlist):
            continue
        if inp.max_gpus and cfg.gpus > inp.max_gpus:
            continue
        if gpu is not None and gpu.end_of_support is not None and gpu.end_of_support <= now.date():
            continue
        world = cfg.gpus if gpu else 1
        if shape.vcpus < max(a.host.min_vcpus_per_node, shape.accelerator_count * a.host.min_vcpus_per_gpu):
            continue
        host_need = shape.accelerator_count * a.host.ram_bytes_per_gpu_process + p * a.host.ram_bytes_per_parameter
        if gpu is not None and host_need > shape.memory_bytes:
            continue
        regions = [r for r in shape.regions if not inp.regions or r in inp.regions]
        rule = catalog.consumption.rule(shape.machine_type)
        flex_ok = inp.flex_start == "allowed" and load_vertex_jobs().flex_start_offered(shape.accelerator_type)
        if not regions:
            continue
        fp32 = gpu is None or gpu.mixed_precision() == "fp32" or inp.precision == "fp32"
        precision = "fp32" if fp32 or gpu is None else gpu.mixed_precision()
        peak = gpu.peak_flops(precision) if gpu else shape.vcpus * shape.cpu_gflops_per_vcpu * 1e9
        capacity = gpu.memory_bytes if gpu else shape.memory_bytes
        usable = float(usable_bytes(capacity, a.memory.safety_margin_fraction))
        context = a.memory.cuda_context_bytes if gpu else a.memory.cpu_process_bytes
        shares, shares_ck = activation_shares(work, len(VARIANTS), a.memory.checkpoint_kept_bytes_per_token_per_hidden)
        for vi, (strategy, server) in enumerate(VARIANTS):
            t, stages = int(VARIANT_TENSOR[vi]), int(VARIANT_PIPELINE[vi])
            cut = t * stages
            if cut > 1 and not _runs_layout(work, gpu is not None, shape.accelerator_count, cfg.nodes, t, stages):
                continue
            data = world // cut
            if (strategy > 0 and world < 2) or (server and (cfg.nodes < 2 or gpu is None)):
                continue
            if work.global_batch % data:
                continue
            share = work.global_batch // data
            states = model_state_bytes(p, strategy, data, int(fp32)) / cut
            gather = gather_bytes(work.largest_layer_parameters, strategy, int(fp32)) / t
            if cut > 1 and data == 1:
                gather = 0.0
            most = share
            if stages > 1:
                most = share // (4 * stages) or max(share // stages, 1)
            split = None
            per_sample_options = [(work.activation_bytes_per_sample * float(shares[vi]), False)]
            if work.checkpointed_activation_bytes_per_sample:
                per_sample_options.append((work.checkpointed_activation_bytes_per_sample * float(shares_ck[vi]), True))
            for per_sample, checkpointed in per_sample_options:
                for micro in sorted((d for d in range(1, most + 1) if share % d == 0), reverse=True):
                    acts = activation_bytes(per_sample, micro, int(fp32))
                    if float(total_bytes(states, acts, gather, context)) <= usable:
                        split = (micro, share // micro, checkpointed)
                        break
                if split:
                    break
            if split is None:
                continue
            micro, steps_per_update, checkpointed = split
            recompute = 1 + a.memory.recompute_flops_fraction if checkpointed else 1
            work_per_step = work.flops_per_sample * micro / cut
            mfu = catalog.throughput.mfu(gpu.accelerator_type, work_per_step) if gpu else a.compute.cpu_mfu
            compute = compute_seconds(work.flops_per_sample, share, peak, mfu) * recompute / cut
            compute /= 1.0 - pipeline_bubble(stages, steps_per_update)
            comm = (
                0.0
                if gpu is None
                else comm_seconds(
                    p / cut,
                    int(fp32),
                    strategy,
                    shape.accelerator_count / t,
                    cfg.nodes / stages,
                    gpu.intra_node_gbytes_per_s * 1e9,
                    shape.network_gbps * GBIT / t,
                    server,
                )
            )
            overhead = steps_per_update * (
                a.compute.gpu_step_overhead_seconds if gpu else a.compute.cpu_step_overhead_seconds
            )
            step = float(step_seconds(compute, comm, a.compute.comm_overlap_fraction, overhead))
            if cut > 1 and gpu is not None:
                layer = LayerShape(work.seq_len, micro, work.d_model, work.n_head)
                scale = steps_per_update * (2.0 if fp32 else 1.0)
                blocks = math.ceil(work.n_layer / stages)
                if t > 1:
                    step += (
                        blocks * scale * tensor_parallel_bytes_per_layer(layer, t) / (gpu.intra_node_gbytes_per_s * 1e9)
                    )
                    step += blocks * steps_per_update * 4 * a.compute.intra_latency_seconds
                if stages > 1:
                    sends = max(shape.accelerator_count / t, 1.0) * scale * pipeline_bytes_per_micro_batch(layer)
                    step += sends / (shape.network_gbps * GBIT)
                    step += steps_per_update * 2 * a.compute.network_latency_seconds
                    step += (stages - 1) * a.compute.gpu_step_overhead_seconds
            servers = math.ceil(cfg.nodes * shape.network_gbps / rs.bandwidth_gbps) if server else 0
            for spot in (False, True):
                if spot and (inp.spot == "never" or not inp.checkpointing):
                    continue
                if not spot and inp.spot == "required":
                    continue
                # Spot at the prior preemption rate: T = T0 / (1 - r N L), L = start-up + half the Spot interval
                loss = (a.job.startup_seconds + a.checkpoints.spot_max_lost_minutes * 30.0) / 3600.0
                load = min(a.job.spot_preemptions_per_node_hour * cfg.nodes * loss, 0.95)
                hours = float(run_hours(work.steps, step, a.job.startup_seconds, spot, load / (1.0 - load)))
                if a.job.max_job_hours and hours > a.job.max_job_hours:
                    continue
                if deadline_hours is not None and hours > deadline_hours:
                    continue
                for region in regions:
                    # How Google sells the shape there (consumption.json): Spot as Spot; otherwise on demand, or
                    # Flex-start when the request allows waiting (on Vertex's FLEX_START kinds, no server pool),
                    # which draws on preemptible quota.
                    if spot:
                        ways = [True] if rule.sold("spot", region) else []
                    else:
                        ways = [False] if rule.sold("on_demand", region) else []
                        if flex_ok and not server and rule.sold("flex_start", region):
                            ways.append(True)
                    if gpu is not None:
                        ways = [w for w in ways if cfg.gpus <= quotas.gpu_limit(region, gpu.accelerator_type, w)]
                    if not ways:
                        continue
                    cpus = (cfg.nodes * shape.vcpus if shape.counts_cpu_quota else 0) + servers * rs.vcpus
                    if cpus > quotas.cpu_limit(region):
                        continue
                    machine = _quote(catalog, shape.machine_type, region, spot)
                    if gpu is not None:
                        machine += shape.accelerator_count * _quote(catalog, gpu.accelerator_type, region, spot)
                    hourly = cfg.nodes * machine + servers * _quote(catalog, rs.machine_type, region, False)
                    cost = hours * hourly
                    if inp.budget_usd and cost > inp.budget_usd:
                        continue
                    key = objective_key(inp, hours, cost, a.objective.value_of_time_usd_per_hour)
                    if best is None or key < best[:2]:
                        best = (*key, (ci, vi, spot, region))
    return best


def _runs_layout(work: Workload, gpus: bool, per_machine: int, machines: int, tensor: int, stages: int) -> bool:
    """Whether layout (tensor, stages) exists on the configuration and the workload can run it, checked by hand."""
    if not gpus or per_machine % tensor or machines % stages or work.family != "gpt" or not work.n_head:
        return False
    if work.measured_memory_bytes > 0 or work.n_head % tensor or stages > work.n_layer:
        return False
    return (tensor == 1 or "tensor" in work.parallelism) and (stages == 1 or "pipeline" in work.parallelism)
