"""Models. They know nothing of DDP, FSDP or devices: the trainer wraps them (trainer/parallel.py)."""
