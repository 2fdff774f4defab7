"""The trainer's container image: where it lives in Artifact Registry and what its entrypoint is.

One description, three readers: the functions' settings (the image the CustomJob's container_spec names), the
deployer (what Cloud Build builds and tags) and the Vertex emulator (which runs the local trainer for that image).
The names come from the `[trainer_image]` table of deploy/topology.toml; the entrypoint is the ENTRYPOINT line of
the Dockerfile it names, so the local stack starts the trainer exactly as the container would. Standard library
only: this module travels inside every function's source bundle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from deploy.topology import TOPOLOGY_FILE, topology_table

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Where trainer/Dockerfile lies: only the deployer and the Vertex emulator read it, from a checkout."""
_ENTRYPOINT = re.compile(r"^\s*ENTRYPOINT\s+(\[.*\])\s*$", re.MULTILINE)


class ImageError(ValueError):
    """The [trainer_image] table or the Dockerfile it names is missing a value or holds a wrong one."""


@dataclass(frozen=True)
class TrainerImage:
    """Where the trainer image is pushed and how it is built.

    repository: the Artifact Registry Docker repository (one per deployment region).
    name: the image name inside it. dockerfile: path of its Dockerfile from the repository root.
    local_tag: the tag the local stack's jobs name (nothing is built locally).
    """

    repository: str
    name: str
    dockerfile: str
    local_tag: str

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
        """True for this image in any region, project and tag (or digest)."""
        pattern = rf"[a-z0-9-]+-docker\.pkg\.dev/[^/]+/{re.escape(self.repository)}/{re.escape(self.name)}[:@].+"
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
    return TrainerImage(**values)


def trainer_image_uri(project: str, region: str, tag: str | None = None) -> str:
    """The trainer image's URI in project and region (the local tag unless tag is given)."""
    return trainer_image().uri(project, region, tag)


@cache
def trainer_entrypoint(root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The exec-form ENTRYPOINT of the trainer's Dockerfile, e.g. ("python", "-m", "trainer.task")."""
    dockerfile = root / trainer_image().dockerfile
    found = _ENTRYPOINT.findall(dockerfile.read_text())
    if len(found) != 1:
        raise ImageError(
            f"{dockerfile} must hold exactly one exec-form ENTRYPOINT line such as "
            f'ENTRYPOINT ["python", "-m", "trainer.task"]; found {len(found)}'
        )
    words = json.loads(found[0])
    if not words or not all(isinstance(word, str) for word in words):
        raise ImageError(f"{dockerfile}: ENTRYPOINT must be a JSON list of strings, found {found[0]}")
    return tuple(words)
