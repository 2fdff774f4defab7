"""What the run's image can run: which GPUs it carries kernels for and whether it has Reduction Server's plugin.

Landfall's own trainer (built-in, or a team's script or package run through it) has one image build per CUDA line
(deploy/topology.toml [[trainer_image.builds]]): the dispatcher runs a plan on the build for its GPU, so the run
supports every GPU some build supports. A team's container image supports what it declares
(`trainer.gpu_capabilities`); where it declares nothing, what the CUDA line its reference names supports (else the
default build's), stated as an assumption in the plan. A team's image is not assumed to carry Reduction Server's
NCCL plugin: its plans use no reducers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from deploy.images import assumed_capabilities, trainer_image
from schemas.gpus import runs_on, sm_name


@dataclass(frozen=True)
class ImageSupport:
    """The run's image as the planner sees it."""

    label: str
    """How plans name it: "Landfall's trainer images (...)" or the team's image URI."""
    capabilities: tuple[str, ...]
    """Compute capabilities ("X.Y") it carries kernels for (over every build for Landfall's images)."""
    reduction_server: bool
    """Google's Reduction Server NCCL plugin is installed (in every build the run may use)."""
    assumption: str = ""
    """Set where the capabilities were assumed rather than declared: the plan states it."""

    def supports(self, capability: str) -> bool:
        return runs_on(capability, self.capabilities)

    def missing(self, capability: str) -> str:
        """Why a GPU of this capability is not planned: "<label> has no kernels for sm_100"."""
        return f"{self.label} has no kernels for {sm_name(capability)}"

    def describe(self) -> str:
        """The plan's line about its image."""
        carried = ", ".join(sm_name(c) for c in self.capabilities)
        plugin = "with" if self.reduction_server else "without"
        text = f"image: {self.label}: kernels for {carried}; {plugin} Google's Reduction Server NCCL plugin"
        return f"{text}; {self.assumption}" if self.assumption else text


@cache
def landfall_images() -> ImageSupport:
    image = trainer_image()
    builds = ", ".join(b.describe() for b in image.builds)
    return ImageSupport(
        label=f"Landfall's trainer images ({builds}; each plan runs on the build for its GPU)",
        capabilities=image.capabilities(),
        reduction_server=all(b.reduction_server for b in image.builds),
    )


@cache
def image_support(image_uri: str = "", declared: tuple[str, ...] = ()) -> ImageSupport:
    """Landfall's images when image_uri is "", else the team's image with its declared (or assumed) capabilities."""
    if not image_uri:
        return landfall_images()
    if declared:
        return ImageSupport(label=image_uri, capabilities=declared, reduction_server=False)
    assumption, assumed = assumed_capabilities(image_uri)
    return ImageSupport(label=image_uri, capabilities=assumed, reduction_server=False, assumption=assumption)


@cache
def kinds_supported(support: ImageSupport, capabilities: tuple[str, ...]) -> np.ndarray:
    """[kind] for GPU kinds of these capabilities (space.kinds order), then True for CPU-only (space.kind -1)."""
    mask = np.array([support.supports(c) for c in capabilities] + [True])
    mask.setflags(write=False)
    return mask
