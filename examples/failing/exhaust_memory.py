"""Fails as a script that asks the accelerator for more memory than it has does (CUDA's message, raised here on
any machine so the failure is the same on a CPU)."""

raise RuntimeError(
    "CUDA out of memory. Tried to allocate 80.00 GiB (GPU 0; 79.10 GiB total capacity; 1.20 GiB already allocated)"
)
