"""docs/access.md, written from the deployment's own configuration: every principal `landfall deploy` creates or
grants to, every role it grants, on what, narrowed by which condition, and why (the account's `about`).

`python -m deploy.gcp.access` writes the file; tests/unit/test_access_doc.py checks that it matches what the
topology and the teams file say, so the page cannot drift from the grants that are made.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from deploy.gcp.config import DeployConfig, Grant, load_deploy_config, topic_names
from deploy.teams import Teams, read_teams

ACCESS_DOC = Path(__file__).resolve().parents[2] / "docs" / "access.md"

_BUCKETS = {
    "landing": "the landing bucket",
    "code": "the code bucket",
    "artifacts": "every job region's artifacts bucket",
}


def _on(grant: Grant, config: DeployConfig, topics: dict[str, str]) -> str:
    """Where a grant applies, in words."""
    kind, target = grant.kind, grant.target
    if kind == "project":
        return "the project"
    if kind == "bucket":
        return _BUCKETS.get(target, f"bucket {target}")
    if kind == "topic":
        return f"topic `{topics.get(target, target)}`"
    if kind == "service_account":
        account = next((a for a in config.service_accounts if a.key == target), None)
        return f"service account `{account.account_id if account else target}` (to act as it)"
    if kind == "function":
        return f"function `{target}`"
    if kind == "functions":
        return "every Landfall function"
    if kind == "dead_letter_topics":
        return "every dead-letter topic"
    if kind == "subscriptions":
        return "every push subscription"
    return grant.on


def _narrowed(grant: Grant, config: DeployConfig) -> str:
    if not grant.condition:
        return ""
    condition = config.condition(grant.condition)
    return f"`{condition.title}`: `{condition.expression}`"


def _para(text: str) -> str:
    """A paragraph wrapped at the docs' 120 columns."""
    return textwrap.fill(text, 120, break_on_hyphens=False, break_long_words=False)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(grants: tuple[Grant, ...], config: DeployConfig, topics: dict[str, str]) -> list[str]:
    rows = ["| Role | On | Narrowed by |", "|---|---|---|"]
    rows += [f"| `{g.role}` | {_cell(_on(g, config, topics))} | {_cell(_narrowed(g, config))} |" for g in grants]
    return rows


def access_markdown(config: DeployConfig, teams: Teams) -> str:
    """The page, from the deploy configuration and the teams file `landfall deploy` reads."""
    topics = topic_names()
    out = [
        "# Who may do what: the principals and grants of a deployment",
        "",
        _para(
            "Generated from `deploy/topology.toml` and `deploy/teams.toml` by `python -m deploy.gcp.access`; "
            "`tests/unit/test_access_doc.py` fails when it no longer matches them. `landfall deploy --dry-run` prints "
            "the same grants as the gcloud commands it runs ({project}, {database} and {bucket} in an expression are "
            "the deployment's)."
        ),
        "",
        _para(
            "Each account holds exactly these roles, each on the narrowest resource the service's IAM offers: "
            "Firestore and Vertex AI grant only at the project (they have no per-collection or per-job IAM), so a "
            "Firestore grant is narrowed to Landfall's database by a condition; no basic role (owner, editor, "
            "viewer) anywhere."
        ),
        "",
        "## Service accounts",
    ]
    for account in config.service_accounts:
        runs = [f.deployed_name for f in config.functions if f.service_account == account.key]
        if config.ui is not None and config.ui.service_account == account.key:
            runs.append(config.ui.service_name)
        out += ["", f"### `{account.account_id}` ({account.key})", "", _para(account.about)]
        if runs:
            out += ["", "Runs: " + ", ".join(f"`{r}`" for r in runs) + "."]
        out += ["", *_table(account.grants, config, topics)]
    if config.service_agents:
        out += ["", "## Google's service agents", ""]
        out += ["Identities Google manages, which Landfall's resources need to reach:"]
        for agent in config.service_agents:
            out += ["", f"### {agent.key} (`{agent.member}`)", "", _para(agent.about)]
            out += ["", *_table(agent.grants, config, topics)]
    if config.ui is not None and config.ui.actions:
        out += ["", "## What a dashboard action adds", ""]
        out += [
            f"Granted to `{config.ui.service_account}` only when the deployment enables the action "
            "(`LANDFALL_UI_ACTIONS`):"
        ]
        for action in config.ui.actions:
            out += ["", f"### {action.name}", "", _para(action.about), "", *_table(action.grants, config, topics)]
    out += ["", "## Teams' own requests topics", ""]
    own = [t for t in teams.teams if t.requests_topic]
    if not own:
        out += [
            _para(
                "The shipped teams file has no team with a `requests_topic`. For each one it gets, `landfall deploy` "
                "creates the topic and its push subscription to the dispatcher; who may publish there is the team's "
                "members, granted `roles/pubsub.publisher` on that topic (docs/teams.md). A request on the shared "
                "requests topic for a team's data is REJECTED `team-caller`."
            )
        ]
    else:
        out += ["| Team | Topic | Publishers |", "|---|---|---|"]
        out += [
            f"| {t.name} | `{t.requests_topic}` | the team's members: `roles/pubsub.publisher` on the topic |"
            for t in own
        ]
    out += ["", "## Teams: their members and their trainer identities", ""]
    out += [
        _para(
            "`landfall deploy` grants each member of a team (`members` in the teams file, deploy/gcp/team_access.py) "
            "what their work needs and nothing project-wide: `roles/storage.objectUser` (create, read, list and "
            "replace) on the landing bucket, narrowed to the team's prefixes there (condition "
            "`landfall-team-TEAM-data`, on the object's name and on the prefix a list asks for), and on the code "
            "bucket, narrowed to the team's folder `teams/TEAM/` where `landfall submit --team` uploads (condition "
            "`landfall-team-TEAM-code`); `roles/pubsub.publisher` on the team's own requests topic; and "
            "`roles/run.invoker` on the dashboard, where they see only their teams' runs (operators: all). Not "
            "granted: a prefix in a bucket that is not the deployment's (its owners grant it), and image pushes "
            "(Artifact Registry's IAM is per repository: give the team a repository of its own)."
        ),
    ]
    out += [
        "",
        _para(
            "Each team also gets a trainer identity of its own, `lf-team-TEAM` (deploy/teams.py `team_account_id`), "
            "which its jobs run as: `roles/storage.objectViewer` on the landing bucket narrowed to the team's "
            "prefixes and on the code bucket narrowed to `teams/TEAM/`, and `roles/storage.objectUser` on every "
            "artifacts bucket narrowed to its runs' folders `runs/TEAM/` (condition `landfall-team-TEAM-runs`); the "
            "accounts that submit jobs (those that may act as the shared trainer account) may act as it. A team's "
            "code therefore cannot read another team's data or code, nor write another team's runs or models. Runs "
            "of no team keep the shared trainer account."
        ),
    ]
    with_members = [t for t in teams.teams if t.members]
    if with_members:
        out += ["", "| Team | Members |", "|---|---|"]
        out += [f"| {t.name} | {', '.join(f'`{m}`' for m in t.members)} |" for t in with_members]
    if teams.operators:
        out += ["", "Operators: " + ", ".join(f"`{o}`" for o in teams.operators) + "."]
    out += ["", "## On the local stack", ""]
    out += [
        _para(
            "`landfall up` (and so `make demo` and the test suite) enforces this policy on Cloud Storage: every "
            "client reaches fake-gcs-server through a gate (deploy/local_iam/storage_gate.py) as the principal a "
            "deployment would run it as. Each function calls as its service account above, a job's replicas as the "
            "CustomJob's `serviceAccount` (the trainer account, or the team's `lf-team-TEAM`), and whoever runs "
            "`gcloud storage`, the CLI or a test as the project's owner; the CLI as a team's member with "
            "`LANDFALL_IDENTITY=user:EMAIL`, held to the member's grants. The gate computes the bindings from the "
            "same code that renders the grants on this page, expands each role to the permissions Google documents "
            "for it (deploy/local_iam/roles.toml), evaluates each condition's expression, and refuses a call no "
            "binding allows with Cloud Storage's own 403: `EMAIL does not have storage.objects.get access to the "
            "Google Cloud Storage object. Permission 'storage.objects.get' denied on resource (or it may not "
            "exist).` Replacing an object also needs `storage.objects.delete`, as in Cloud Storage. Another bucket "
            "data may land in (`LANDFALL_ALLOWED_BUCKETS`) is taken as opened by its owners to the accounts that "
            "read the landing bucket, with the same roles; a team's own identity gets nothing there, since what a "
            "team may read of a bucket that is not the deployment's is its owners' grant."
        ),
        "",
        _para(
            "Every permission each identity used, and the grant that allowed it, is kept in the stack's state "
            "folder (`iam-used.jsonl`). `LANDFALL_LOCAL_IAM=off landfall up` records without refusing. The gate "
            "shows what a grant allows; it is not a security boundary (a process on the machine can reach "
            "fake-gcs-server itself)."
        ),
    ]
    out += [
        "",
        _para(
            "The Vertex emulator holds every JobService and ModelService call to the same policy: each function's "
            "calls name its account (`LANDFALL_VERTEX_ENDPOINT=HOST:PORT/as/serviceAccount:EMAIL`, sent as gRPC "
            "metadata by functions/gcp/clients.py), and the caller needs the call's permission on the project "
            "(`aiplatform.customJobs.create`, `.get`, `.list`, `.cancel`, `.delete`; `aiplatform.models.upload`, "
            "`.get`, `.list`, `.update`, `.delete`) and, to create a job, `iam.serviceAccounts.actAs` on the account "
            "it runs as, else PERMISSION_DENIED naming the permission, as Vertex AI answers."
        ),
        "",
        _para(
            "Publishes are held to it too, by the stack's Pub/Sub gate (`deploy/local_iam/pubsub_gate.py`, service "
            "`pubsub_front`): each function, and the CLI run as `LANDFALL_IDENTITY`, publishes through it "
            "(`LANDFALL_PUBSUB_GATE`), its calls naming its identity in gRPC metadata (functions/gcp/clients.py "
            '`publisher_client`), and needs `pubsub.topics.publish` on the topic, else PERMISSION_DENIED "User not '
            "authorized to perform this action.\", as Pub/Sub answers. Other Pub/Sub calls, and Firestore's, are not "
            "checked on the local stack."
        ),
    ]
    out += ["", "## Conditions", "", "| Title | Means | Expression |", "|---|---|---|"]
    out += [f"| `{c.title}` | {_cell(c.description)} | `{_cell(c.expression)}` |" for c in config.conditions]
    return "\n".join(out) + "\n"


def main() -> None:
    text = access_markdown(load_deploy_config(), read_teams())
    ACCESS_DOC.write_text(text)
    print(f"wrote {ACCESS_DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
