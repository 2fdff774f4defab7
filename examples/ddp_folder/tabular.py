"""The data and the model of examples/ddp_folder/main.py, in a module of their own beside it: `main.py` imports them
as `from tabular import ...`, as it would when run from this folder on a laptop."""

from __future__ import annotations

import csv
from pathlib import Path

import torch


def read_rows(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Every CSV file under data_dir (a header, numbers only): the features and the last column as the target."""
    rows: list[list[float]] = []
    for path in sorted(data_dir.rglob("*.csv")):
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            next(reader)  # header
            rows += [[float(v) for v in row] for row in reader if row]
    if not rows:
        raise SystemExit(f"no CSV rows under {data_dir}")
    table = torch.tensor(rows, dtype=torch.float32)
    return table[:, :-1], table[:, -1:]


def make_model(features: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(features, 1)
