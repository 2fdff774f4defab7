"""The trainer's container images: where they live in Artifact Registry, which GPUs each carries kernels for, and
what their entrypoint is.

One description, three readers: the functions' settings (the image the CustomJob's container_spec names), the
deployer (what Cloud Build builds and tags) and the Vertex emulator (which runs the local trainer for that image).
The names come from the `[trainer_image]` table of deploy/topology.toml; the entrypoint is the ENTRYPOINT line of
the Dockerfile it names, so the local stack starts the trainer exactly as the container would. Standard library
only: this module travels inside every function's source bundle.

One Dockerfile, one build per CUDA line ([[trainer_image.builds]]): each build has its own image name
(`trainer`, `trainer-cu130`), the same tag, and a manifest (its CUDA version, the compute capabilities it carries
kernels for, whether Google's Reduction Server NCCL plugin is installed). The dispatcher runs a plan on the first
build that supports the plan's GPU (`build_for`); the planner considers a GPU only where some build supports it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from deploy.topology import TOPOLOGY_FILE, topology_table
from schemas.gpus import parse_capability, runs_on

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Where trainer/Dockerfile lies: only the deployer and the Vertex emulator read it, from a checkout."""
_ENTRYPOINT = re.compile(r"^\s*ENTRYPOINT\s+(\[.*\])\s*$", re.MULTILINE)


class ImageError(ValueError):
    """The [trainer_image] table or the Dockerfile it names is missing a value or holds a wrong one."""


@dataclass(frozen=True)
class ImageBuild:
    """One build of the trainer image: a CUDA line and what it carries (its manifest)."""

    name: str
    """Image name in the repository (`trainer` + name_suffix)."""
    cuda: str
    """CUDA version of the base image, e.g. "12.6"."""
    base_image: str
    """The BASE_IMAGE build argument (an official PyTorch CUDA image)."""
    compute_capabilities: tuple[str, ...]
    """GPU architectures ("X.Y", sm_XY) the build carries kernels for."""
    reduction_server: bool
    """Google's Reduction Server NCCL plugin (google-reduction-server) is installed."""

    @property
    def cuda_line(self) -> str:
        """The CUDA major version, e.g. "12"."""
        return self.cuda.split(".")[0]

    def supports(self, capability: str) -> bool:
        """Whether a GPU of this compute capability runs this build's kernels."""
        return runs_on(capability, self.compute_capabilities)

    def describe(self) -> str:
        """ "trainer-cu130 (CUDA 13.0)"."""
        return f"{self.name} (CUDA {self.cuda})"


@dataclass(frozen=True)
class TrainerImage:
    """Where the trainer images are pushed and how they are built.

    repository: the Artifact Registry Docker repository (one per deployment region).
    name: the first build's image name inside it. dockerfile: path of their Dockerfile from the repository root.
    local_tag: the tag the local stack's jobs name (nothing is built locally).
    builds: one per CUDA line, the first the default (the image LANDFALL_TRAINER_IMAGE names).
    """

    repository: str
    name: str
    dockerfile: str
    local_tag: str
    builds: tuple[ImageBuild, ...] = ()

    def build_for(self, capability: str) -> ImageBuild | None:
        """The first build whose kernels run on a GPU of this compute capability; None when none does."""
        return next((b for b in self.builds if b.supports(capability)), None)

    def build_named(self, name: str) -> ImageBuild:
        for build in self.builds:
            if build.name == name:
                return build
        raise ImageError(f"no trainer image build is named {name!r}; builds: {', '.join(b.name for b in self.builds)}")

    def capabilities(self) -> tuple[str, ...]:
        """Every compute capability some build carries kernels for."""
        return tuple(dict.fromkeys(c for b in self.builds for c in b.compute_capabilities))

    def as_build(self, uri: str, build: ImageBuild) -> str:
        """uri (this image's default build, any region, project and tag) renamed to build's image, same tag; any
        other image is returned as it is."""
        if not self.matches(uri) or build.name == self.name:
            return uri
        head, rest = uri.split(f"/{self.repository}/", 1)
        tail = rest[len(self.name) :]
        return f"{head}/{self.repository}/{build.name}{tail}" if rest.startswith(self.name) else uri

    def uri(self, project: str, region: str, tag: str | None = None) -> str:
        """`<region>-docker.pkg.dev/<project>/<repository>/<name>:<tag>` (Artifact Registry's Docker format)."""
        return f"{region}-docker.pkg.dev/{project}/{self.repository}/{self.name}:{tag or self.local_tag}"

    def in_region(self, uri: str, region: str) -> str:
        """This image's uri moved to region's repository (same project, repository, name and tag); any other
        image is returned as it is. A deployment pushes the image to every job region's repository."""
        if not self.matches(uri):
            return uri
        return f"{region}-docker.pkg.dev/" + uri.split("/", 1)[1]

    def matches(self, uri: str) -> bool:
        """True for this image (any of its builds) in any region, project and tag (or digest)."""
        names = "|".join(re.escape(n) for n in (self.name, *(b.name for b in self.builds)))
        pattern = rf"[a-z0-9-]+-docker\.pkg\.dev/[^/]+/{re.escape(self.repository)}/(?:{names})[:@].+"
        return re.fullmatch(pattern, uri) is not None


@cache
def trainer_image(path: Path = TOPOLOGY_FILE) -> TrainerImage:
    """The [trainer_image] table of the topology file, checked."""
    table = topology_table(path).get("trainer_image")
    if not isinstance(table, dict):
        raise ImageError(f"{path.name}: missing the [trainer_image] table (repository, name, dockerfile, local_tag)")
    values = {}
    for key in ("repository", "name", "dockerfile", "local_tag"):
        value = table.get(key)
        if not isinstance(value, str) or not value:
            raise ImageError(f"{path.name}: trainer_image.{key} must be a non-empty string, found {value!r}")
        values[key] = value
    if not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", values["repository"]):
        raise ImageError(
            f"{path.name}: trainer_image.repository {values['repository']!r} is not an Artifact "
            "Registry repository id (lowercase letters, digits and hyphens, starting with a letter)"
        )
    return TrainerImage(**values, builds=_builds(table.get("builds"), values["name"], path))


def _builds(raw: object, name: str, path: Path) -> tuple[ImageBuild, ...]:
    if not isinstance(raw, list) or not raw:
        raise ImageError(f"{path.name}: [[trainer_image.builds]] must list at least one build (one per CUDA line)")
    builds = []
    for i, entry in enumerate(raw):
        where = f"{path.name}: trainer_image.builds[{i}]"
        if not isinstance(entry, dict):
            raise ImageError(f"{where}: expected a table")
        suffix, cuda, base = entry.get("name_suffix"), entry.get("cuda"), entry.get("base_image")
        if not isinstance(suffix, str) or not re.fullmatch(r"(-[a-z0-9]+)*", suffix):
            raise ImageError(f"{where}.name_suffix: expected '' or '-' and lowercase letters or digits, got {suffix!r}")
        if not isinstance(cuda, str) or not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
            raise ImageError(f"{where}.cuda: expected a CUDA version such as '12.6', got {cuda!r}")
        if not isinstance(base, str) or not base:
            raise ImageError(f"{where}.base_image: expected the base image reference, got {base!r}")
        caps = entry.get("compute_capabilities")
        if not isinstance(caps, list) or not caps:
            raise ImageError(f"{where}.compute_capabilities: expected a non-empty list such as ['8.0', '9.0']")
        for cap in caps:
            try:
                parse_capability(cap, f"{where}.compute_capabilities")
            except ValueError as exc:
                raise ImageError(str(exc)) from exc
        server = entry.get("reduction_server")
        if not isinstance(server, bool):
            raise ImageError(f"{where}.reduction_server: expected true or false, got {server!r}")
        builds.append(ImageBuild(name + suffix, cuda, base, tuple(caps), server))
    if builds[0].name != name:
        raise ImageError(f"{path.name}: the first trainer_image build must keep the name {name!r} (name_suffix = '')")
    if len({b.name for b in builds}) != len(builds):
        raise ImageError(f"{path.name}: two trainer_image builds share a name")
    return tuple(builds)


def assumed_capabilities(image_uri: str, builds: Iterable[ImageBuild] | None = None) -> tuple[str, tuple[str, ...]]:
    """For a team's image that declares no capabilities: (the assumption in words, the capabilities assumed), from
    the CUDA line its reference names (`cuda12.1`, `cu121`, `cuda-13.0`), else the first build's line."""
    builds = tuple(builds if builds is not None else trainer_image().builds)
    lines = {b.cuda_line: b for b in builds}
    found = re.search(r"(?:cuda[-_]?|cu)(1[0-9])(?:\.?[0-9]+)?", image_uri.lower())
    if found and found.group(1) in lines:
        build = lines[found.group(1)]
        return (
            f"{image_uri} names CUDA {found.group(1)}: assumed to carry what Landfall's CUDA {build.cuda} "
            f"build carries",
            build.compute_capabilities,
        )
    default = builds[0]
    named = f"names CUDA {found.group(1)}, a line Landfall does not build" if found else "names no CUDA version"
    return (
        f"{image_uri} declares no trainer.gpu_capabilities and {named}: assumed to carry what Landfall's CUDA "
        f"{default.cuda} build carries",
        default.compute_capabilities,
    )


def trainer_image_uri(project: str, region: str, tag: str | None = None) -> str:
    """The trainer image's URI in project and region (the local tag unless tag is given)."""
    return trainer_image().uri(project, region, tag)


@cache
def trainer_entrypoint(root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The exec-form ENTRYPOINT of the trainer's Dockerfile, e.g. ("python", "-m", "trainer.launcher")."""
    dockerfile = root / trainer_image().dockerfile
    found = _ENTRYPOINT.findall(dockerfile.read_text())
    if len(found) != 1:
        raise ImageError(
            f"{dockerfile} must hold exactly one exec-form ENTRYPOINT line such as "
            f'ENTRYPOINT ["python", "-m", "trainer.launcher"]; found {len(found)}'
        )
    words = json.loads(found[0])
    if not words or not all(isinstance(word, str) for word in words):
        raise ImageError(f"{dockerfile}: ENTRYPOINT must be a JSON list of strings, found {found[0]}")
    return tuple(words)
