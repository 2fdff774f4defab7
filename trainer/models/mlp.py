"""A tabular multi-layer perceptron that standardises its raw inputs with statistics fitted on the training split."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class TabularMLP(nn.Module):
    """Linear -> ReLU blocks of the preset's hidden sizes, then a linear head with n_outputs units.

    Takes raw feature values: (x - feature_mean) / feature_std happens inside, from buffers saved with the weights.
    """

    feature_mean: torch.Tensor
    feature_std: torch.Tensor

    def __init__(
        self,
        n_features: int,
        hidden_sizes: Sequence[int],
        n_outputs: int,
        feature_mean: Sequence[float] | None = None,
        feature_std: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        mean = torch.tensor(feature_mean if feature_mean is not None else [0.0] * n_features, dtype=torch.float32)
        std = torch.tensor(feature_std if feature_std is not None else [1.0] * n_features, dtype=torch.float32)
        self.register_buffer("feature_mean", mean)
        self.register_buffer("feature_std", std)
        layers: list[nn.Module] = []
        width = n_features
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # nn.Module's __call__ is typed as returning Any; a Linear head returns a tensor.
        out: torch.Tensor = self.head(self.body((x - self.feature_mean) / self.feature_std))
        return out
