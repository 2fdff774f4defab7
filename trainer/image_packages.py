"""The image's own installed packages as the floor a team's requirements install over (docs/trainer-contract.md,
"Requirements and the image's packages").

A team's requirements are resolved with every distribution the image holds pinned at its version (an installer
constraints file), so `torch` in a requirement never brings another torch. A requirement whose versions exclude
the image's is refused before anything is installed, naming the package, both versions and what to do; the line
REPLACE_LINE in the requirements asks to install over the image instead, and the run records a warning.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPLACE_LINE = "landfall-replace-image-packages"
"""A requirement line that asks to let the requirements replace the image's packages (torch included)."""


@dataclass(frozen=True)
class Conflict:
    """A requirement the image's installed version does not satisfy."""

    name: str
    wanted: str
    """The requirement line as given."""
    image_version: str

    def __str__(self) -> str:
        return f"{self.name}: the requirement {self.wanted!r} excludes the image's {self.name} {self.image_version}"


def installed(paths: Iterable[str] | None = None) -> dict[str, str]:
    """Canonical name -> version of the distributions on paths (default: this interpreter's sys.path); the first
    found of a name wins, as import would."""
    found: dict[str, str] = {}
    dists = (
        importlib.metadata.distributions(path=list(paths)) if paths is not None else importlib.metadata.distributions()
    )
    for dist in dists:
        name = dist.metadata["Name"] if dist.metadata else None
        if name and dist.version:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def image() -> dict[str, str]:
    """The image's installed distributions: those this interpreter sees."""
    return installed()


def constraints_text(image: Mapping[str, str]) -> str:
    """An installer constraints file pinning each of the image's distributions at its version."""
    return "".join(f"{name}=={version}\n" for name, version in sorted(image.items()))


def named(requirements: Iterable[str]) -> list[str]:
    """The canonical names the requirement lines ask for, REPLACE_LINE left out, in order, once each."""
    names: dict[str, None] = {}
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(requirement.name)
        if name != REPLACE_LINE:
            names.setdefault(name)
    return list(names)


def conflicts(requirements: Iterable[str], image: Mapping[str, str]) -> list[Conflict]:
    """Each requirement whose versions exclude the image's installed version of its package (a line whose marker
    does not apply here is skipped)."""
    found = []
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        have = image.get(name)
        if have is not None and not requirement.specifier.contains(have, prereleases=True):
            found.append(Conflict(name, line.strip(), have))
    return found


def refusal(found: list[Conflict]) -> str:
    """Why the run stops, and the two ways on."""
    listed = "; ".join(str(c) for c in found)
    pins = ", ".join(f"{c.name}=={c.image_version}" for c in found)
    return (
        f"the requirements conflict with the trainer image's packages: {listed}. Require the image's version "
        f"({pins}) or drop the line to run on the image's packages, or add the requirement line "
        f"{REPLACE_LINE!r} to install yours over the image's (the run records a warning)"
    )


def site_dirs(env_dir: Path) -> list[str]:
    """The site-packages folders of a virtual environment."""
    return [str(p) for p in sorted(env_dir.glob("lib/python*/site-packages")) if p.is_dir()]
