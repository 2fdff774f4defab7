"""Numeric precision: bf16 autocast where the GPU supports it, fp16 with loss scaling on older GPUs, fp32 on CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from schemas.vocabulary import AUTO_PRECISION, FP32, PRECISIONS, REQUESTED_PRECISIONS
from trainer.errors import ConfigError


@dataclass(frozen=True)
class Precision:
    """The resolved precision of one run."""

    name: str
    """One of vocabulary.PRECISIONS."""
    device_type: str
    """'cuda' or 'cpu'."""

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name)

    @property
    def loss_scaling(self) -> bool:
        """fp16 gradients underflow without a dynamic loss scale; bf16 has fp32's range and needs none."""
        return self.name == "fp16"

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        dtype = self.autocast_dtype
        if dtype is None:
            yield
            return
        with torch.autocast(device_type=self.device_type, dtype=dtype):
            yield

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A dynamic loss scaler for fp16; a disabled one (a pass-through) otherwise."""
        return torch.amp.GradScaler(self.device_type, enabled=self.loss_scaling)


def resolve_precision(requested: str, cuda: bool, bf16_supported: bool) -> Precision:
    """requested (one of vocabulary.REQUESTED_PRECISIONS) -> the precision this device runs, or a ConfigError
    saying why not."""
    device_type = "cuda" if cuda else "cpu"
    if requested == AUTO_PRECISION.name:
        if not cuda:
            return Precision(FP32, device_type)
        return Precision("bf16" if bf16_supported else "fp16", device_type)
    if requested == "bf16" and cuda and not bf16_supported:
        raise ConfigError("--precision=bf16: this GPU has no bf16 (T4, V100, P100, P4); use --precision=fp16 or auto")
    if requested == "fp16" and not cuda:
        raise ConfigError("--precision=fp16 needs a GPU (loss-scaled fp16 is a GPU feature); use fp32 or auto on CPU")
    if requested not in PRECISIONS:
        raise ConfigError(f"--precision={requested!r}: expected one of {', '.join(REQUESTED_PRECISIONS)}")
    return Precision(requested, device_type)


def detect_precision(requested: str) -> Precision:
    """resolve_precision for the device this process sees."""
    cuda = torch.cuda.is_available()
    return resolve_precision(requested, cuda, cuda and torch.cuda.is_bf16_supported())
