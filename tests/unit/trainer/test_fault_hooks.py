"""The trainer's out-of-memory test hook is off unless its variable names a text the dataset URI holds."""

from __future__ import annotations

import pytest

from trainer.fault_hooks import OOM_VARIABLE, raise_if_simulated_oom, simulated_oom


@pytest.mark.parametrize(
    ("environ", "uri", "fires"),
    [
        ({}, "gs://b/datasets/e2e-oom/", False),
        ({OOM_VARIABLE: ""}, "gs://b/datasets/e2e-oom/", False),
        ({OOM_VARIABLE: "/e2e-oom/"}, "gs://b/datasets/other/", False),
        ({OOM_VARIABLE: "/e2e-oom/"}, "gs://b/datasets/e2e-oom/", True),
    ],
)
def test_the_hook_fires_only_for_the_named_datasets(environ: dict[str, str], uri: str, fires: bool) -> None:
    assert (simulated_oom(uri, environ) is not None) is fires


def test_it_raises_the_error_torch_raises() -> None:
    import torch

    with pytest.raises(torch.cuda.OutOfMemoryError, match=r"CUDA out of memory.*simulated"):
        raise_if_simulated_oom("gs://b/datasets/e2e-oom/", {OOM_VARIABLE: "/e2e-oom/"})
    raise_if_simulated_oom("gs://b/datasets/x/", {OOM_VARIABLE: "/e2e-oom/"})
