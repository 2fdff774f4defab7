"""Step time, duration and cost. Functions take numpy arrays or plain numbers alike.

Compute: a GPU runs its micro-batch's model FLOPs at peak x assumed MFU (stated per GPU kind in gpus.json).
Communication per step, for S = gradient bytes (2 per parameter in 16-bit, 4 in fp32):
- inside a VM, ring all-reduce over g GPUs: 2(g-1)/g x S / (NVLink or PCIe bandwidth);
- across n VMs, hierarchical: 2(n-1)/n x S / (the VM's network bandwidth), or S / bandwidth with a Reduction
  Server (each worker sends and receives its gradients once);
- DDP, ZeRO-1 and ZeRO-2 move 2P worth of gradients; FULL_SHARD moves 3P (x 1.5).
A fixed fraction of communication hides behind the backward pass (assumptions.json: comm_overlap_fraction).
"""

from __future__ import annotations

import numpy as np

from functions.planning.memory import FSDP

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


def compute_seconds(flops_per_sample, micro_batch, peak_flops, mfu):
    return flops_per_sample * micro_batch / (peak_flops * mfu)


def comm_seconds(
    parameters, fp32, strategy, gpus_per_node, nodes, intra_bytes_per_s, network_bytes_per_s, reduction_server
):
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


def step_seconds(compute, comm, overlap, overhead):
    return compute + (1.0 - overlap) * comm + overhead


def run_hours(steps, step, startup_seconds, spot, spot_overhead):
    """Wall hours including startup; Spot adds the expected preemption overhead."""
    base = (startup_seconds + steps * step) / 3600.0
    return base * (1.0 + spot_overhead * np.asarray(spot, dtype=np.float64))


def reduction_server_replicas(nodes, network_gbps, server_gbps):
    """Servers needed so their total bandwidth covers the workers' total (Vertex's sizing rule)."""
    return np.ceil(nodes * network_gbps / server_gbps).astype(np.int64)
