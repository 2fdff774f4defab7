"""Step time, duration and cost. Functions take numpy arrays or plain numbers alike.

Compute: a GPU runs its micro-batch's model FLOPs at peak x MFU, the MFU its kind reached on measured runs with as
much work per micro-step (functions/planning/throughput.py).
Communication per step, for S = gradient bytes (2 per parameter in 16-bit, 4 in fp32):
- inside a VM, ring all-reduce over g GPUs: 2(g-1)/g x S / (NVLink or PCIe bandwidth);
- across n VMs, hierarchical: 2(n-1)/n x S / (the VM's network bandwidth), or S / bandwidth with a Reduction
  Server (each worker sends and receives its gradients once);
- DDP, ZeRO-1 and ZeRO-2 move 2P worth of gradients; FULL_SHARD moves 3P (x 1.5).
A fixed fraction of communication hides behind the backward pass (assumptions.json: comm_overlap_fraction).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from functions.planning.memory import FSDP

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from functions.planning.memory import Values

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


def compute_seconds(flops_per_sample: Values, micro_batch: Values, peak_flops: Values, mfu: Values) -> Values:
    return flops_per_sample * micro_batch / (peak_flops * mfu)


def comm_seconds(
    parameters: Values,
    fp32: Values,
    strategy: int | NDArray[Any],
    gpus_per_node: Values,
    nodes: Values,
    intra_bytes_per_s: Values,
    network_bytes_per_s: Values,
    reduction_server: bool | NDArray[Any],
) -> Values:
    """Exposed-before-overlap communication time of one step."""
    grad_bytes = parameters * (2.0 + 2.0 * np.asarray(fp32, dtype=np.float64))
    g = np.maximum(gpus_per_node, 1)
    n = np.maximum(nodes, 1)
    intra = 2.0 * (g - 1) / g * grad_bytes / intra_bytes_per_s
    ring = 2.0 * (n - 1) / n * grad_bytes / network_bytes_per_s
    inter = np.where(np.asarray(reduction_server, dtype=bool), grad_bytes / network_bytes_per_s, ring)
    inter = np.where(n > 1, inter, 0.0)
    factor = np.where(np.asarray(strategy) == FSDP, 1.5, 1.0)
    return factor * (intra + inter)


def step_seconds(compute: Values, comm: Values, overlap: Values, overhead: Values) -> Values:
    return compute + (1.0 - overlap) * comm + overhead


def run_hours(steps: Values, step: Values, startup_seconds: Values, spot: Values, spot_overhead: Values) -> Values:
    """Wall hours including startup; Spot adds the expected preemption overhead."""
    base = (startup_seconds + steps * step) / 3600.0
    return base * (1.0 + spot_overhead * np.asarray(spot, dtype=np.float64))


def reduction_server_replicas(nodes: Values, network_gbps: Values, server_gbps: Values) -> NDArray[np.int64]:
    """Servers needed so their total bandwidth covers the workers' total (Vertex's sizing rule)."""
    return np.ceil(nodes * network_gbps / server_gbps).astype(np.int64)
