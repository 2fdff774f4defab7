"""What a team's members may do in the project, granted by `landfall deploy` from the teams file (docs/teams.md
"Members' grants", docs/access.md): drop data under the team's prefixes in the landing bucket and code under the
team's folder in the code bucket (object create, narrowed by an IAM condition on the object's name), publish on the
team's own requests topic, and open the dashboard (its invoker, beside --ui-users). Nothing project-wide.

Not granted here: a data prefix in a bucket other than the deployment's landing bucket (that bucket's owners grant
it), and pushing images (Artifact Registry's IAM is per repository: every team would write every team's images;
an operator grants `roles/artifactregistry.writer` on a repository of the team's own).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from deploy.gcp import iam
from deploy.gcp.iam import Names, Resource
from deploy.gcp.steps import Step
from deploy.teams import Team, Teams, code_folder

_REMEDY = (
    "You need permission to set IAM policy on it (roles/storage.admin on the bucket, roles/pubsub.admin on the topic)."
)


def _starts_with(bucket: str, prefixes: Sequence[str]) -> str:
    """A CEL expression true for objects of `bucket` whose names start with one of `prefixes` ("" = any)."""
    names = [f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{p}")' for p in prefixes]
    return " || ".join(names)


def _condition(expression: str, title: str, description: str) -> str:
    return f"expression={expression},title={title},description={description}"


def landing_prefixes(team: Team, landing_bucket: str) -> tuple[str, ...]:
    """The team's prefixes in the deployment's landing bucket (its `owns` entries whose bucket glob matches it)."""
    return tuple(o.prefix for o in team.owns if fnmatch.fnmatchcase(landing_bucket, o.bucket))


def member_grants(team: Team, n: Names) -> list[tuple[str, str, Resource]]:
    """(member, role, resource) of every grant a member of `team` gets."""
    rows: list[tuple[str, str, Resource]] = []
    data = landing_prefixes(team, n.landing_bucket)
    data_condition = _condition(
        _starts_with(n.landing_bucket, data),
        f"landfall-team-{team.name}-data",
        f"Only objects under team {team.name}'s prefixes",
    )
    code_condition = _condition(
        _starts_with(n.code_bucket, (code_folder(team.name),)),
        f"landfall-team-{team.name}-code",
        f"Only objects in team {team.name}'s code folder",
    )
    for member in team.members:
        if data:
            rows.append((member, "roles/storage.objectCreator", Resource("bucket", n.landing_bucket, data_condition)))
        rows.append((member, "roles/storage.objectCreator", Resource("bucket", n.code_bucket, code_condition)))
        if team.requests_topic:
            rows.append((member, "roles/pubsub.publisher", Resource("topic", team.requests_topic)))
    return rows


def member_steps(teams: Teams, n: Names, section: str) -> list[Step]:
    """The gcloud commands granting each team's members what their work needs."""
    return [
        Step(
            f"grant {member} (team {team.name}) {role} on {resource.kind} {resource.name}",
            iam.bind(resource, member, role, n),
            section,
            remedy=_REMEDY,
        )
        for team in teams.teams
        for member, role, resource in member_grants(team, n)
    ]


def dashboard_users(users: Sequence[str], teams: Teams) -> tuple[str, ...]:
    """Who may open the dashboard: `users` (--ui-users, or the deployer) and every team's members and operators, each
    once; none when the dashboard is not deployed (`users` empty)."""
    if not users:
        return ()
    return tuple(dict.fromkeys((*users, *teams.operators, *(m for t in teams.teams for m in t.members))))


__all__ = ["dashboard_users", "landing_prefixes", "member_grants", "member_steps"]
