"""What each task minimises and how it is scored: cross-entropy (classes or next byte) or mean squared error."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def training_loss(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean loss over the batch (and, for causal-lm, over every position)."""
    if task == "causal-lm":
        return F.cross_entropy(output.float().flatten(0, 1), target.flatten())
    if task == "tabular-classification":
        return F.cross_entropy(output.float(), target)
    return F.mse_loss(output.float().squeeze(-1), target)


def score(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[summed loss, correct predictions, counted items] for a batch, as one float64 tensor on the batch's device.

    Items are samples for tabular tasks and tokens for causal-lm; correct is 0 for regression.
    """
    if task == "causal-lm":
        logits, labels = output.float().flatten(0, 1), target.flatten()
        loss = F.cross_entropy(logits, labels, reduction="sum")
        correct = (logits.argmax(-1) == labels).sum()
        count = labels.numel()
    elif task == "tabular-classification":
        loss = F.cross_entropy(output.float(), target, reduction="sum")
        correct = (output.argmax(-1) == target).sum()
        count = target.numel()
    else:
        loss = F.mse_loss(output.float().squeeze(-1), target, reduction="sum")
        correct = torch.zeros((), device=output.device)
        count = target.numel()
    return torch.stack([loss.double(), correct.double(), torch.tensor(float(count), device=output.device).double()])
