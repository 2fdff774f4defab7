"""The exact version of a team's code a run trains with, found before it is planned (schemas/code_version.py).

Each Cloud Storage object the request's trainer names (its script, its packages) is looked up once; the run records
its generation, digest and size, and its job names `URI#GENERATION`, so that an upload to the same path while the run
waits or restarts does not change what it trains with, and the lineage says which version made the model. An object
that is not there refuses the request before anything is planned, naming it.
"""

from __future__ import annotations

from typing import Protocol

from deploy.teams import code_folder
from functions.gcp.gcs_objects import ObjectInfo
from schemas.code_version import CodeObject
from schemas.training_request import TrainingRequest


class CodeObjects(Protocol):
    """What the lookup needs of Cloud Storage (functions/gcp/gcs_objects.GcsObjects)."""

    def stat(self, bucket: str, name: str) -> ObjectInfo | None: ...


def code_uris(request: TrainingRequest) -> tuple[str, ...]:
    """The gs:// objects the request's trainer names: its script, or its packages (none for the built-in trainer and
    an image)."""
    t = request.trainer
    return ((t.script,) if t.script else ()) + tuple(t.package_uris)


def code_versions(request: TrainingRequest, objects: CodeObjects) -> tuple[tuple[CodeObject, ...], str | None]:
    """(the version of each code object, None), or ((), the reason) when one is not there."""
    found = []
    for uri in code_uris(request):
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        info = objects.stat(bucket, name)
        if info is None:
            return (), (
                f"{uri} does not exist (any more): upload it again (`landfall submit` uploads a script or package "
                "before it publishes) and send the request again"
            )
        found.append(CodeObject(uri, info.generation, info.crc32c, info.size))
    return tuple(found), None


def outside_team_folder(request: TrainingRequest, team: str, code_bucket: str) -> str | None:
    """Why a team's run cannot read its code where the team has a trainer identity of its own (it reads only the
    team's folder teams/TEAM/ in the code bucket), or None when every code object is there."""
    folder = f"gs://{code_bucket}/{code_folder(team)}"
    outside = [uri for uri in code_uris(request) if not uri.startswith(folder)]
    if not outside:
        return None
    return (
        f"{outside[0]} is outside the code folder of team {team!r} ({folder}), the only code its runs' identity may "
        f"read: upload it there (`landfall submit --team {team}` does) and send the request again"
    )


__all__ = ["CodeObjects", "code_uris", "code_versions", "outside_team_folder"]
