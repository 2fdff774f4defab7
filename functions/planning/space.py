"""The candidate space, built once per (catalog, quota table, region order) and reused by every request.

A hardware configuration is one machine shape repeated over `nodes` machines: every shape on one node, and shapes
marked scale_out on each node count in assumptions.json. On each configuration the planner weighs five parallel
variants (DDP, DDP + Reduction Server, ZeRO-1, ZeRO-2, FSDP), without Spot (on demand, Flex-start or a reservation)
or Spot, in every region that offers the shape in a way Google sells it (data/consumption.json); everything that
does not depend on the request (prices per region, quota checks, how each shape is sold, host sizes, bandwidths) is
computed here into numpy arrays indexed [config], [config, region, spot] or [config, region, spot, server].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from functions.planning.catalog import Catalog, MachineShape
from functions.planning.memory import frozen_weight_bytes, gather_bytes, model_state_bytes
from functions.planning.performance import GBIT, comm_seconds, reduction_server_replicas
from functions.planning.quotas import QuotaTable
from functions.planning.reservations import Reservation
from functions.planning.throughput import curve_rows, hinge_terms
from schemas.plan import layout_text
from schemas.vertex_jobs import load_vertex_jobs
from schemas.vocabulary import (
    CONSUMPTION_MODE_TERMS,
    FLEX_START,
    FP32,
    ON_DEMAND,
    PRECISION_INDEX,
    PRECISION_POLICIES,
    RESERVATION,
    SPOT,
    STRATEGIES,
    STRATEGY_INDEX,
    STRATEGY_TITLES,
    ConsumptionMode,
)

DDP = STRATEGY_INDEX["ddp"]
FSDP = STRATEGY_INDEX["fsdp"]
FP32_INDEX = PRECISION_INDEX[FP32]
TENSOR_DEGREES = (1, 2, 4, 8)
"""Tensor-parallel degrees weighed: within one machine, over its NVLink (a degree must divide its GPUs)."""
PIPELINE_DEGREES = (1, 2, 4, 8, 16)
"""Pipeline stages weighed: across machines, one or more machines a stage (a degree must divide the machines)."""
LAYOUTS = tuple((t, p) for p in PIPELINE_DEGREES for t in TENSOR_DEGREES if t * p > 1)
"""(tensor_parallel, pipeline_parallel) of the model-parallel variants, FSDP on the remaining data dimension."""
DATA_VARIANTS = len(STRATEGIES) + 1
"""The first DATA_VARIANTS variants are data parallel only (every strategy, and DDP also with a server); a workload
that cannot be split by layers and heads is searched over these alone."""
# (strategy index into vocabulary.STRATEGIES, uses a Reduction Server): every strategy, and DDP also with a server;
# then FSDP under each model-parallel layout (VARIANT_TENSOR, VARIANT_PIPELINE).
VARIANTS = tuple(
    (s, server) for s in range(len(STRATEGIES)) for server in ((False, True) if s == DDP else (False,))
) + tuple((FSDP, False) for _ in LAYOUTS)
VARIANT_STRATEGY = np.array([v[0] for v in VARIANTS])
VARIANT_SERVER = np.array([v[1] for v in VARIANTS], dtype=np.int64)
VARIANT_TENSOR = np.array([1] * DATA_VARIANTS + [t for t, _ in LAYOUTS], dtype=np.int64)
"""[variant] tensor-parallel degree (1: none)."""
VARIANT_PIPELINE = np.array([1] * DATA_VARIANTS + [p for _, p in LAYOUTS], dtype=np.int64)
"""[variant] pipeline stages (1: none)."""
assert (
    len(VARIANTS) == len(VARIANT_TENSOR)
    and not (VARIANT_TENSOR[:DATA_VARIANTS] * VARIANT_PIPELINE[:DATA_VARIANTS] - 1).any()
)


def variant_title(v: int) -> str:
    """A variant in words: its strategy's title, with its model-parallel layout ("FSDP, tensor parallel 8 x 4
    pipeline stages")."""
    title = STRATEGY_TITLES[STRATEGIES[int(VARIANT_STRATEGY[v])]]
    return layout_text(title, int(VARIANT_TENSOR[v]), int(VARIANT_PIPELINE[v]))


NO_END_OF_SUPPORT = 10**9
# Reason codes the space decides alone; they must equal search.CODE's (checked in search.py).
STATIC_CODES = {"invalid": 1, "region": 8, "not_sold": 9, "quota": 10}
STATIC_PASS = 17
AXIS_MODES = (ON_DEMAND, SPOT)
"""The search's last axis (`spot`, `s` in the arrays): index 0 is priced and quota-checked as on demand, 1 as Spot
(vocabulary.ConsumptionMode.price and preemptible_quota). The modes that are not preemptible ride index 0 and are
told apart after the search: Flex-start where the shape is sold that way and the request may wait (preemptible
quota, on-demand price), a reservation where it holds the machines (no machine cost)."""
SOLD_MODES = tuple(m.name for m in CONSUMPTION_MODE_TERMS if not m.reserved)
"""The modes of Space.sold's last axis (reservations are per request: RegionView)."""
SOLD_ON_DEMAND, SOLD_SPOT, SOLD_FLEX = (SOLD_MODES.index(m.name) for m in (ON_DEMAND, SPOT, FLEX_START))


@dataclass(frozen=True)
class ShapePin:
    """The machine shape a request pins (constraints.machine_type, accelerator_count, replica_count); empty or 0 =
    free. A pinned space holds only the configurations that match, with any pinned node count."""

    machine_type: str = ""
    accelerator_count: int = 0
    replica_count: int = 0

    @property
    def active(self) -> bool:
        return bool(self.machine_type or self.accelerator_count or self.replica_count)

    def matches(self, shape: MachineShape) -> bool:
        return (not self.machine_type or shape.machine_type == self.machine_type) and (
            not self.accelerator_count or shape.accelerator_count == self.accelerator_count
        )

    def describe(self) -> str:
        parts = [self.machine_type] if self.machine_type else []
        if self.accelerator_count:
            parts.append(f"{self.accelerator_count} GPUs per machine")
        if self.replica_count:
            parts.append(f"{self.replica_count} machine{'s' if self.replica_count > 1 else ''}")
        return ", ".join(parts)


NO_PIN = ShapePin()


@dataclass(frozen=True)
class HardwareConfig:
    shape: MachineShape
    nodes: int

    @property
    def gpus(self) -> int:
        return self.shape.accelerator_count * self.nodes


@dataclass(frozen=True, eq=False)
class PrecisionArrays:
    """Per-config figures for one precision policy ("auto" or "fp32"). The memory and communication formulas are
    linear in the parameter count, so they are evaluated here once with one parameter (one gathered-layer
    parameter) and scaled by the request's count."""

    fp32: np.ndarray
    """[config] whether training runs in fp32 (CPU-only, GPUs without 16-bit math, or fp32 requested)."""
    precision: np.ndarray
    """[config] index into vocabulary.PRECISIONS."""
    state_bytes_per_param: np.ndarray
    """[variant, config] model_state_bytes(1, ...)."""
    frozen_bytes_per_param: np.ndarray
    """[variant, config] frozen_weight_bytes(1, ...): a parameter that does not train (adapters, LoRA)."""
    gather_bytes_per_param: np.ndarray
    """[variant, config] gather_bytes(1, ...)."""
    comm_seconds_per_param: np.ndarray
    """[variant, config] comm_seconds(1, ...)."""
    peak_flops: np.ndarray
    """[config] peak FLOP/s in the precision used (the MFU depends on the request: mfu_base, mfu_slopes)."""
    activation_factor: np.ndarray
    """[config] 1 for 16-bit activations, 2 for fp32."""


@dataclass(frozen=True, eq=False)
class RegionView:
    """The cheapest allowed region per candidate for one set of allowed regions: [spot, variant, config]."""

    hourly: np.ndarray
    """USD/h of the whole job there; inf where no allowed region has the shape within quota."""
    region: np.ndarray
    """Index into Space.regions; -1 where none."""
    quota_blocked: np.ndarray
    """Offered in an allowed region, but over quota in every one."""
    not_offered: np.ndarray
    """[config] offered in no allowed region."""
    static_code: np.ndarray
    """[spot, variant, config] int8: the request-independent reason code (invalid variant, region, not sold that
    way, quota), or search.PASS."""
    reserved: np.ndarray
    """[spot, variant, config]: runs on the reservation (its machines already paid for)."""


@dataclass(frozen=True, eq=False)
class Space:
    """Arrays over configurations; treat them as read-only."""

    catalog: Catalog
    quotas: QuotaTable
    pin: ShapePin
    """NO_PIN for the full space."""
    regions: tuple[str, ...]
    """Region order; ties on price go to the earlier region (the default region comes first)."""
    configs: tuple[HardwareConfig, ...]
    nodes: np.ndarray
    gpus_per_node: np.ndarray
    world: np.ndarray
    """Training processes: GPUs in all, or 1 on a CPU-only machine."""
    gpu_total: np.ndarray
    is_cpu: np.ndarray
    kind: np.ndarray
    """Index into `kinds`, -1 for CPU-only."""
    kinds: tuple[str, ...]
    capacity_bytes: np.ndarray
    """Memory one process may use: the GPU's, or the machine's RAM on CPU-only shapes."""
    host_ram_bytes: np.ndarray
    host_vcpus_ok: np.ndarray
    peak_mixed: np.ndarray
    peak_fp32: np.ndarray
    mixed_precision: np.ndarray
    """0 bf16, 1 fp16, 2 fp32: the 16-bit format on this GPU (fp32 where it has none)."""
    log_work: np.ndarray
    """[grid] the throughput model's grid: log of FLOPs per GPU per micro-step (catalog.throughput)."""
    mfu_base: np.ndarray
    """[config] the MFU of each configuration's GPU kind at the grid's first work (cpu_mfu on CPU-only machines)."""
    mfu_slopes: np.ndarray
    """[segment, config] its slope on each grid segment: throughput.mfu_at evaluates both at a request's work."""
    step_overhead: np.ndarray
    context_bytes: np.ndarray
    """[config] CUDA context per GPU process, or the Python process on a CPU-only machine."""
    intra_bytes_per_s: np.ndarray
    network_bytes_per_s: np.ndarray
    end_of_support: np.ndarray
    """date.toordinal() of end of support, NO_END_OF_SUPPORT when none."""
    server_replicas: np.ndarray
    variant_valid: np.ndarray
    """[config, variant]: sharding needs >= 2 processes; a Reduction Server needs >= 3 nodes of GPUs (it shortens
    nothing on 2)."""
    price: np.ndarray
    """[config, region, spot, server] USD/h for the whole job; inf where the region does not offer the shape."""
    offered: np.ndarray
    """[config, region]."""
    quota_ok: np.ndarray
    """[config, region, pool, server]: GPUs and vCPUs within the region's limits, pool 0 the on-demand quota, 1 the
    preemptible one (quota_pool: the pool a mode draws on)."""
    server_price: np.ndarray
    """[region] on-demand USD/h of one Reduction Server machine."""
    modes: dict[str, PrecisionArrays]
    """"auto" and "fp32"."""
    sold: np.ndarray
    """[config, region, mode] whether Google sells the shape there on demand, as Spot, as Flex-start (SOLD_MODES;
    Flex-start also needs a GPU kind Vertex's FLEX_START takes), from data/consumption.json."""
    reservable: np.ndarray
    """[config, region] whether Google sells the shape through reservations there."""
    _views: dict[tuple, RegionView] = field(default_factory=dict, repr=False)
    _buyable: dict[bool, np.ndarray] = field(default_factory=dict, repr=False)
    notes: dict[tuple, tuple[tuple[str, ...], bool]] = field(default_factory=dict, repr=False)
    """Request-independent assumption notes per (config, spot, region, server, fp32, memory margin), filled by
    plan_record."""

    def buyable(self, flex: bool) -> np.ndarray:
        """[config, region, spot, server]: offered, sold that way (on demand, or Flex-start when `flex` and there is
        no server pool: FLEX_START needs one machine configuration in every pool; Spot) and within the quota it
        draws on (Flex-start uses preemptible quota)."""
        out = self._buyable.get(flex)
        if out is None:
            on_demand = self.sold[:, :, SOLD_ON_DEMAND, None] & self.quota_ok[:, :, quota_pool(ON_DEMAND), :]
            if flex:
                flex_ok = self.sold[:, :, SOLD_FLEX, None] & self.quota_ok[:, :, quota_pool(FLEX_START), :]
                flex_ok[:, :, 1] = False
                on_demand = on_demand | flex_ok
            spot = self.sold[:, :, SOLD_SPOT, None] & self.quota_ok[:, :, quota_pool(SPOT), :]
            out = self._buyable[flex] = np.stack([on_demand, spot], axis=2) & self.offered[:, :, None, None]
        return out

    def region_view(
        self, region_mask: np.ndarray, flex: bool = False, reservation: Reservation | None = None
    ) -> RegionView:
        """Cheapest allowed region per candidate, in the modes Google sells it in (Flex-start only when the request
        allows waiting), on the reservation where it holds the machines; cached per distinct mask, flex and
        reservation (requests reuse a handful)."""
        key = (region_mask.tobytes(), flex, reservation)
        view = self._views.get(key)
        if view is None:
            in_region = self.offered & region_mask[None, :]
            buyable = self.buyable(flex)
            allowed = in_region[:, :, None, None] & buyable
            masked = np.where(allowed, self.price, np.inf)
            best = np.argmin(masked, axis=1)  # [config, spot, server]
            price = np.take_along_axis(masked, best[:, None], axis=1)[:, 0]
            reserved = np.zeros(price.shape, dtype=bool)
            if reservation is not None:
                j = self.regions.index(reservation.region) if reservation.region in self.regions else -1
                if j >= 0 and region_mask[j]:
                    holds = np.array(
                        [reservation.matches(x.shape) and x.nodes <= reservation.count for x in self.configs]
                    )
                    holds &= self.offered[:, j] & self.reservable[:, j] & ~self.is_cpu
                    for server in (0, 1):
                        ok = holds & self.quota_ok[:, j, quota_pool(ON_DEMAND), server]
                        price[ok, 0, server] = server * self.server_replicas[ok] * self.server_price[j]
                        best[ok, 0, server] = j
                        reserved[ok, 0, server] = True
            hourly = np.ascontiguousarray(price[:, :, VARIANT_SERVER].transpose(1, 2, 0))  # [spot, variant, config]
            region = np.ascontiguousarray(best[:, :, VARIANT_SERVER].transpose(1, 2, 0))
            not_offered = ~in_region.any(axis=1)
            ways = np.zeros((len(self.configs), len(self.regions), 2, 2), dtype=bool)  # [config, region, spot, server]
            ways[:, :, 0, :] = self.sold[:, :, SOLD_ON_DEMAND, None]
            if flex:
                ways[:, :, 0, 0] |= self.sold[:, :, SOLD_FLEX]
            ways[:, :, 1, :] = self.sold[:, :, SOLD_SPOT, None]
            never_sold = ~(in_region[:, :, None, None] & ways).any(axis=1) & ~reserved  # [config, spot, server]
            never_sold = never_sold[:, :, VARIANT_SERVER].transpose(1, 2, 0)
            quota_blocked = ~np.isfinite(hourly) & ~not_offered
            static = np.full(hourly.shape, STATIC_PASS, dtype=np.int8)
            static[quota_blocked] = STATIC_CODES["quota"]
            static[never_sold & ~not_offered] = STATIC_CODES["not_sold"]
            static[:, :, not_offered] = STATIC_CODES["region"]
            static[:, ~self.variant_valid.T] = STATIC_CODES["invalid"]
            view = RegionView(
                hourly=hourly,
                region=np.where(np.isfinite(hourly), region, -1).astype(np.int16),
                quota_blocked=quota_blocked,
                not_offered=not_offered,
                static_code=static,
                reserved=np.ascontiguousarray(reserved[:, :, VARIANT_SERVER].transpose(1, 2, 0)),
            )
            if len(self._views) > 256:
                self._views.clear()
            self._views[key] = view
        return view


def quota_pool(mode: ConsumptionMode) -> int:
    """The index of quota_ok's third axis that holds the quota `mode` draws on (0 on demand, 1 preemptible)."""
    return int(mode.preemptible_quota)


def _configs(catalog: Catalog, pin: ShapePin = NO_PIN) -> list[HardwareConfig]:
    """Every shape on one node and scale-out shapes on each scale-out node count; under a pin, the matching shapes
    on the pinned node count (GPU shapes only when it is above 1), or on the usual counts when it is free."""
    shapes = [shape for shape in catalog.shapes if pin.matches(shape)]
    if pin.replica_count:
        return [
            HardwareConfig(shape, pin.replica_count)
            for shape in shapes
            if pin.replica_count == 1 or not shape.is_cpu_only
        ]
    configs = [HardwareConfig(shape, 1) for shape in shapes]
    for shape in shapes:
        if shape.scale_out and not shape.is_cpu_only:
            configs.extend(HardwareConfig(shape, n) for n in catalog.assumptions.scale_out_nodes)
    return configs


def build_space(catalog: Catalog, quotas: QuotaTable, default_region: str, pin: ShapePin = NO_PIN) -> Space:
    a = catalog.assumptions
    regions = tuple(sorted(catalog.regions, key=lambda r: (r != default_region, catalog.regions.index(r))))
    configs = _configs(catalog, pin)
    if not configs:
        raise ValueError(f"no machine shape matches the pin {pin}; check it with pin_problems first")
    kinds = tuple(catalog.gpus)
    c, r = len(configs), len(regions)
    nodes = np.array([x.nodes for x in configs], dtype=np.int64)
    per_node = np.array([x.shape.accelerator_count for x in configs], dtype=np.int64)
    is_cpu = per_node == 0
    gpus = [catalog.gpus[x.shape.accelerator_type] if x.shape.accelerator_type else None for x in configs]
    vcpus = np.array([x.shape.vcpus for x in configs], dtype=np.int64)
    min_vcpus = np.maximum(a.host.min_vcpus_per_node, per_node * a.host.min_vcpus_per_gpu)
    cpu_peak = np.array([x.shape.vcpus * x.shape.cpu_gflops_per_vcpu * 1e9 for x in configs])
    network_gbps = np.array([x.shape.network_gbps for x in configs])
    servers = np.where(
        (nodes > 1) & ~is_cpu, reduction_server_replicas(nodes, network_gbps, a.reduction_server.bandwidth_gbps), 0
    )
    valid = np.ones((c, len(VARIANTS)), dtype=bool)
    world = np.where(is_cpu, 1, per_node * nodes)
    valid[:, VARIANT_STRATEGY != DDP] = (world > 1)[:, None]
    # Reducers only where they can shorten the step: with 2 machines a ring all-reduce already moves each gradient
    # byte once per machine (2(n-1)/n = 1), as the reducers would (performance.comm_seconds).
    valid[:, VARIANT_SERVER == 1] = ((nodes > 2) & ~is_cpu)[:, None]
    # Model parallelism: tensor parallelism inside a machine (the degree divides its GPUs), pipeline stages across
    # machines (the stages divide the machines), GPUs only; FSDP shards what is left over the data dimension.
    t_v, p_v = VARIANT_TENSOR[None, :], VARIANT_PIPELINE[None, :]
    layout_ok = ~is_cpu[:, None] & (per_node[:, None] % t_v == 0) & (nodes[:, None] % p_v == 0)
    valid[:, DATA_VARIANTS:] = layout_ok[:, DATA_VARIANTS:]
    split = t_v * p_v  # [1, variant]: the ways one model is cut
    data_world = np.maximum(world[:, None] // split, 1)  # [config, variant]: processes on the data dimension

    book = catalog.prices
    shape_price: dict[tuple[str, str | None, int], np.ndarray] = {}
    price = np.full((c, r, 2, 2), np.inf)
    offered = np.zeros((c, r), dtype=bool)
    quota_ok = np.zeros((c, r, 2, 2), dtype=bool)
    server_price = np.array(
        [book.price(a.reduction_server.machine_type, reg, ON_DEMAND.price).usd_per_hour for reg in regions]
    )
    sold = np.zeros((c, r, len(SOLD_MODES)), dtype=bool)
    reservable = np.zeros((c, r), dtype=bool)
    vertex = load_vertex_jobs()
    for i, cfg in enumerate(configs):
        rule = catalog.consumption.rule(cfg.shape.machine_type)
        flex_kind = vertex.flex_start_offered(cfg.shape.accelerator_type)
        for j, reg in enumerate(regions):
            sold[i, j] = [rule.sold(m, reg) and (m != FLEX_START.name or flex_kind) for m in SOLD_MODES]
            reservable[i, j] = rule.sold(RESERVATION.name, reg)
    for i, cfg in enumerate(configs):
        shape = cfg.shape
        key = (shape.machine_type, shape.accelerator_type, shape.accelerator_count)
        if key not in shape_price:
            per_machine = np.full((r, 2), np.inf)
            for j, reg in enumerate(regions):
                if reg not in shape.regions:
                    continue
                for s, axis in enumerate(AXIS_MODES):
                    usd = book.price(shape.machine_type, reg, axis.price).usd_per_hour
                    if shape.accelerator_type:
                        gpu = book.price(shape.accelerator_type, reg, axis.price)
                        usd += shape.accelerator_count * gpu.usd_per_hour
                    per_machine[j, s] = usd
            shape_price[key] = per_machine
        per_machine = shape_price[key]
        offered[i] = np.isfinite(per_machine[:, 0])
        price[i, :, :, 0] = cfg.nodes * per_machine
        price[i, :, :, 1] = price[i, :, :, 0] + servers[i] * server_price[:, None]
        cpu_use = cfg.nodes * shape.vcpus if shape.counts_cpu_quota else 0
        for j, reg in enumerate(regions):
            cpu_limit = quotas.cpu_limit(reg)
            for pool, preemptible in enumerate((False, True)):
                gpu_ok = shape.accelerator_type is None or cfg.gpus <= quotas.gpu_limit(
                    reg, shape.accelerator_type, preemptible
                )
                quota_ok[i, j, pool, 0] = gpu_ok and cpu_use <= cpu_limit
                quota_ok[i, j, pool, 1] = gpu_ok and cpu_use + servers[i] * a.reduction_server.vcpus <= cpu_limit
    strategy = VARIANT_STRATEGY[None, :]
    mixed_precision = np.array(
        [PRECISION_INDEX[g.mixed_precision()] if g else FP32_INDEX for g in gpus], dtype=np.int64
    )
    peak_mixed = np.array([g.peak_flops(g.mixed_precision()) if g else p for g, p in zip(gpus, cpu_peak, strict=True)])
    peak_fp32 = np.array([g.peak_flops(FP32) if g else p for g, p in zip(gpus, cpu_peak, strict=True)])
    log_work = np.array(catalog.throughput.log_work)
    rows = curve_rows(catalog.throughput, [x.shape.accelerator_type for x in configs], a.compute.cpu_mfu)
    mfu_base, mfu_slopes = hinge_terms(log_work, rows)
    intra = np.array([g.intra_node_gbytes_per_s * 1e9 if g else 1.0 for g in gpus])
    modes = {}
    for mode in PRECISION_POLICIES:
        fp32 = is_cpu | (mixed_precision == FP32_INDEX) | (mode == FP32)
        # A model-parallel GPU holds 1/(t x p) of the model, sharded again over the data dimension; FSDP gathers a
        # layer's 1/t slice, and nothing where the data dimension is one process.
        gather = gather_bytes(1.0, strategy, fp32[:, None]) / t_v
        gather = np.where((split > 1) & (data_world == 1), 0.0, gather)
        modes[mode] = PrecisionArrays(
            fp32=fp32,
            precision=np.where(fp32, FP32_INDEX, mixed_precision),
            state_bytes_per_param=np.ascontiguousarray(
                np.transpose(model_state_bytes(1.0, strategy, data_world, fp32[:, None]) / split)
            ),
            frozen_bytes_per_param=np.ascontiguousarray(
                np.transpose(frozen_weight_bytes(1.0, strategy, data_world, fp32[:, None]) / split)
            ),
            gather_bytes_per_param=np.ascontiguousarray(np.broadcast_to(gather, valid.shape).T),
            # The data dimension's gradients: each GPU's 1/(t x p) of them, reduced among the GPUs holding the
            # same slice: per_node/t of them in each machine, over nodes/p machines, the t slices sharing the NIC.
            comm_seconds_per_param=np.ascontiguousarray(
                np.transpose(
                    comm_seconds(
                        1.0 / split,
                        fp32[:, None],
                        strategy,
                        per_node[:, None] / t_v,
                        nodes[:, None] / p_v,
                        intra[:, None],
                        network_gbps[:, None] * GBIT / t_v,
                        VARIANT_SERVER[None, :],
                    )
                )
            ),
            peak_flops=np.where(fp32, peak_fp32, peak_mixed),
            activation_factor=np.where(fp32, 2.0, 1.0),
        )
    return Space(
        modes=modes,
        catalog=catalog,
        quotas=quotas,
        pin=pin,
        regions=regions,
        configs=tuple(configs),
        nodes=nodes,
        gpus_per_node=per_node,
        world=world,
        gpu_total=per_node * nodes,
        is_cpu=is_cpu,
        kind=np.array([kinds.index(x.shape.accelerator_type) if x.shape.accelerator_type else -1 for x in configs]),
        kinds=kinds,
        capacity_bytes=np.array(
            [g.memory_bytes if g else x.shape.memory_bytes for g, x in zip(gpus, configs, strict=True)],
            dtype=np.float64,
        ),
        host_ram_bytes=np.array([x.shape.memory_bytes for x in configs], dtype=np.float64),
        host_vcpus_ok=vcpus >= min_vcpus,
        peak_mixed=peak_mixed,
        peak_fp32=peak_fp32,
        mixed_precision=mixed_precision,
        log_work=log_work,
        mfu_base=mfu_base,
        mfu_slopes=mfu_slopes,
        step_overhead=np.where(is_cpu, a.compute.cpu_step_overhead_seconds, a.compute.gpu_step_overhead_seconds),
        context_bytes=np.where(is_cpu, a.memory.cpu_process_bytes, a.memory.cuda_context_bytes).astype(float),
        intra_bytes_per_s=intra,
        network_bytes_per_s=network_gbps * GBIT,
        end_of_support=np.array(
            [g.end_of_support.toordinal() if g and g.end_of_support else NO_END_OF_SUPPORT for g in gpus],
            dtype=np.int64,
        ),
        server_replicas=servers.astype(np.int64),
        variant_valid=valid,
        price=price,
        offered=offered,
        quota_ok=quota_ok,
        server_price=server_price,
        sold=sold,
        reservable=reservable,
    )


_SPACES: dict[tuple[int, QuotaTable, str, ShapePin], Space] = {}


def space_for(catalog: Catalog, quotas: QuotaTable, default_region: str, pin: ShapePin = NO_PIN) -> Space:
    """The cached space for this catalog object, quota table, default region and shape pin."""
    key = (id(catalog), quotas, default_region, pin)
    space = _SPACES.get(key)
    if space is None or space.catalog is not catalog:
        if len(_SPACES) > 64:
            _SPACES.clear()
        space = _SPACES[key] = build_space(catalog, quotas, default_region, pin)
    return space
