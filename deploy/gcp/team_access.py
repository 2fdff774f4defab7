"""What a team's members and a team's trainer identity may do in the project, granted by `landfall deploy` from the
teams file (docs/teams.md "Members' grants", "A trainer identity per team"; docs/access.md).

Members: drop data under the team's prefixes in the landing bucket and code under the team's folder in the code bucket
(objectUser: create, read, list and replace there, narrowed by an IAM condition on the object's name and the listed
prefix), publish on the team's own requests topic, and open the dashboard (its invoker, beside --ui-users). Nothing
project-wide.

The team's trainer identity (`lf-team-NAME`, deploy/teams.py team_account_id), which its jobs run as: read the team's
prefixes in the landing bucket and its folder in the code bucket, and write its runs' folders (runs/NAME/) in every
artifacts bucket; the accounts that submit jobs (dispatch, listener, reconciler) may act as it.

Not granted here: a data prefix in a bucket other than the deployment's landing bucket (that bucket's owners grant
it), and pushing images (Artifact Registry's IAM is per repository: every team would write every team's images;
an operator grants `roles/artifactregistry.writer` on a repository of the team's own).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from deploy.gcp import iam
from deploy.gcp.config import DeployConfig, DeployConfigError
from deploy.gcp.iam import Names, Resource
from deploy.gcp.steps import Step
from deploy.teams import Team, Teams, code_folder, team_account_id

_REMEDY = (
    "You need permission to set IAM policy on it (roles/storage.admin on the bucket, roles/pubsub.admin on the topic)."
)


LIST_PREFIX = 'api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
"""The prefix a list request asks for: a list is checked against the bucket, not an object, so a condition on object
names alone never lets it through; this attribute does (Cloud Storage's IAM conditions)."""
MAX_OPERATORS = 12
"""The most logical operators (&&, ||) one IAM condition expression may hold."""


def _starts_with(bucket: str, prefixes: Sequence[str], *, team: str) -> str:
    """A CEL expression true for objects of `bucket` whose names start with one of `prefixes`, and for listing
    under them; refused (DeployConfigError) where it would pass IAM's limit of logical operators."""
    terms = [
        f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{p}") || {LIST_PREFIX}.startsWith("{p}")'
        for p in prefixes
    ]
    if 2 * len(terms) - 1 > MAX_OPERATORS:
        raise DeployConfigError(
            f"team {team!r} has {len(terms)} prefixes in gs://{bucket}; an IAM condition holds at most "
            f"{MAX_OPERATORS} logical operators, which is {(MAX_OPERATORS + 1) // 2} prefixes (each also lets the "
            "team list under it): give the team's data a common parent prefix in the teams file"
        )
    return " || ".join(terms)


def _condition(expression: str, title: str, description: str) -> str:
    """The value of gcloud's --condition flag. Its KEY=VALUE pairs are split on commas, and an expression holds one
    (`api.getAttribute(NAME, "")`): so the pairs are split on ';' instead (`^;^`, gcloud's alternate delimiter,
    `gcloud topic escaping`), which neither the expression nor the words hold."""
    pairs = f"expression={expression};title={title};description={description}"
    if pairs.count(";") != 2:
        raise DeployConfigError(f"an IAM condition for {title} would hold a ';': {pairs!r}")
    return f"^;^{pairs}"


def landing_prefixes(team: Team, landing_bucket: str) -> tuple[str, ...]:
    """The team's prefixes in the deployment's landing bucket (its `owns` entries whose bucket glob matches it)."""
    return tuple(o.prefix for o in team.owns if fnmatch.fnmatchcase(landing_bucket, o.bucket))


def _data_condition(team: Team, n: Names) -> str:
    return _condition(
        _starts_with(n.landing_bucket, landing_prefixes(team, n.landing_bucket), team=team.name),
        f"landfall-team-{team.name}-data",
        f"Only objects under team {team.name}'s prefixes",
    )


def _code_condition(team: Team, n: Names) -> str:
    return _condition(
        _starts_with(n.code_bucket, (code_folder(team.name),), team=team.name),
        f"landfall-team-{team.name}-code",
        f"Only objects in team {team.name}'s code folder",
    )


def submitters(config: DeployConfig) -> tuple[str, ...]:
    """The accounts that create jobs: those the topology lets act as the trainer account (each must act as the
    identity its jobs run as)."""
    return tuple(
        a.key
        for a in config.service_accounts
        if any(g.role == ACT_AS and g.on == f"service_account:{TRAINER}" for g in a.grants)
    )


ACT_AS = "roles/iam.serviceAccountUser"
TRAINER = "trainer"
"""The [gcp.service_accounts] key of the shared trainer identity (runs of no team run as it)."""


def account_grants(
    team: Team, n: Names, runs_prefix: str, submitting: tuple[str, ...]
) -> list[tuple[str, str, Resource]]:
    """(member, role, resource) of every grant the team's trainer identity gets, and the submitters' act-as on it."""
    email = team_account_email(team, n)
    member = iam.account_member(email)
    rows: list[tuple[str, str, Resource]] = []
    if landing_prefixes(team, n.landing_bucket):
        rows.append(
            (member, "roles/storage.objectViewer", Resource("bucket", n.landing_bucket, _data_condition(team, n)))
        )
    rows.append((member, "roles/storage.objectViewer", Resource("bucket", n.code_bucket, _code_condition(team, n))))
    for bucket in n.artifact_buckets:
        runs = _condition(
            _starts_with(bucket, (f"{runs_prefix}{team.name}/",), team=team.name),
            f"landfall-team-{team.name}-runs",
            f"Only team {team.name}'s runs' folders",
        )
        rows.append((member, "roles/storage.objectUser", Resource("bucket", bucket, runs)))
    for submitter in submitting:
        rows.append((iam.account_member(n.accounts[submitter]), ACT_AS, Resource("service_account", email)))
    return rows


def team_account_email(team: Team, n: Names) -> str:
    return f"{team_account_id(team.name)}@{n.project}.iam.gserviceaccount.com"


def account_steps(teams: Teams, n: Names, runs_prefix: str, submitting: tuple[str, ...], section: str) -> list[Step]:
    """Create each team's trainer identity, then grant it (and the submitters' act-as on it)."""
    steps: list[Step] = []
    proj = f"--project={n.project}"
    for team in teams.teams:
        email = team_account_email(team, n)
        steps.append(
            Step(
                f"create team {team.name}'s trainer identity {email}",
                (
                    "gcloud",
                    "iam",
                    "service-accounts",
                    "create",
                    team_account_id(team.name),
                    f"--display-name=Landfall team {team.name}",
                    f"--description=Runs team {team.name}'s training jobs: reads its data and code, writes its runs",
                    proj,
                ),
                section,
                probe=("gcloud", "iam", "service-accounts", "describe", email, proj),
            )
        )
    for team in teams.teams:
        steps += [
            Step(
                f"grant {member} {role} on {resource.kind} {resource.name} (team {team.name})",
                iam.bind(resource, member, role, n),
                section,
                remedy=_REMEDY,
            )
            for member, role, resource in account_grants(team, n, runs_prefix, submitting)
        ]
    return steps


MEMBER_ROLE = "roles/storage.objectUser"
"""What a member holds under the team's prefixes and code folder: create, and also read, list and overwrite there
(`landfall submit` looks for an upload it already made; a marker dropped again replaces the one before)."""


def member_grants(team: Team, n: Names) -> list[tuple[str, str, Resource]]:
    """(member, role, resource) of every grant a member of `team` gets."""
    rows: list[tuple[str, str, Resource]] = []
    data = landing_prefixes(team, n.landing_bucket)
    data_condition, code_condition = _data_condition(team, n), _code_condition(team, n)
    for member in team.members:
        if data:
            rows.append((member, MEMBER_ROLE, Resource("bucket", n.landing_bucket, data_condition)))
        rows.append((member, MEMBER_ROLE, Resource("bucket", n.code_bucket, code_condition)))
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


__all__ = [
    "ACT_AS",
    "account_grants",
    "account_steps",
    "dashboard_users",
    "landing_prefixes",
    "member_grants",
    "member_steps",
    "submitters",
    "team_account_email",
]
