"""The dashboard (`landfall ui`, package landfall/ui/) as a Cloud Run service that only the deployment's users reach.

Access is Cloud Run's IAM invoker check (docs/deploy.md "The dashboard" says why, not IAP): the service is deployed
with --no-allow-unauthenticated, and its IAM policy grants roles/run.invoker to exactly the principals
`landfall deploy --ui-users` names; without --ui-users, the account running the deploy (`gcloud config get-value
account`), so a deployment always has a dashboard its deployer can open (`--no-ui` leaves it out). It runs as its own
account with read-only roles ([gcp.service_accounts.ui]); each action of `--ui-actions` ([gcp.ui.actions.*]) adds
the grants its CLI command needs and its name to LANDFALL_UI_ACTIONS, which the dashboard reads.

Staged under .landfall/deploy/: the build context (deploy/ui/Dockerfile at its root and what it copies), its Cloud
Build config, the service's environment (the functions' settings, which the CLI reads too) and its IAM policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy.gcp import iam
from deploy.gcp.bundles import DOCKER_BUILDER, REPO_ROOT, STAGE_DIR, env_yaml, stage_context
from deploy.gcp.config import DeployConfig, UiSpec
from deploy.gcp.iam import Names, Resource
from deploy.gcp.steps import Arg, Step
from deploy.images import trainer_image

UI_CONTEXT = ("functions", "schemas", "deploy", "landfall")
"""What deploy/ui/Dockerfile copies (a test checks its COPY lines and Dockerfile.dockerignore against this)."""
NEEDED = ("landfall/ui/__main__.py", "landfall/ui/requirements.txt")
"""What the image cannot be built or started without: `python -m landfall.ui` and the dashboard's pins."""
ACTIONS_ENV = "LANDFALL_UI_ACTIONS"
"""The actions the dashboard may offer, a comma list; empty: read-only."""
HOSTS_ENV = "LANDFALL_UI_HOSTS"
"""The names the dashboard takes an action for (landfall/ui/hosts.py), a comma list."""
INVOKER = "roles/run.invoker"
PUBLIC = frozenset({"allUsers", "allAuthenticatedUsers"})
_PRINCIPAL = re.compile(
    r"(?:user|group|serviceAccount):[^@\s,:]+@[^@\s,]+\.[^@\s,.]+"
    r"|domain:[a-z0-9-]+(?:\.[a-z0-9-]+)+"
    r"|principal(?:Set)?://iam\.googleapis\.com/\S+"
)
BUILD_CONFIG = "ui.cloudbuild.json"
ENV_FILE = "ui.env.yaml"
POLICY_FILE = "ui.policy.json"


class UiAccessError(ValueError):
    """Who may open the dashboard, or what it may do, is not given as it must be; the message says what to pass."""


def parse_users(values: Iterable[str]) -> tuple[str, ...]:
    """`--ui-users` values (each may be a comma list) as IAM principals, in the order given, each once."""
    users: list[str] = []
    for value in values:
        for principal in (p.strip() for p in value.split(",")):
            if not principal:
                continue
            if principal in PUBLIC:
                raise UiAccessError(
                    f"--ui-users {principal} would let anyone open the dashboard; name the deployment's users "
                    "(user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN)"
                )
            if not _PRINCIPAL.fullmatch(principal):
                raise UiAccessError(
                    f"--ui-users {principal!r} is not an IAM principal; expected user:EMAIL, group:EMAIL, "
                    "serviceAccount:EMAIL or domain:DOMAIN, e.g. --ui-users group:ml-team@example.com"
                )
            if principal not in users:
                users.append(principal)
    return tuple(users)


def parse_actions(values: Iterable[str], spec: UiSpec | None) -> tuple[str, ...]:
    """`--ui-actions` values (comma lists, as LANDFALL_UI_ACTIONS) checked against [gcp.ui.actions.*]."""
    names = [a.strip() for value in values for a in value.split(",") if a.strip()]
    known = [a.name for a in spec.actions] if spec else []
    for name in names:
        if name not in known:
            raise UiAccessError(
                f"--ui-actions {name!r} is no action the dashboard may offer; known: {', '.join(known) or 'none'}"
            )
    return tuple(dict.fromkeys(names))


def check(config: DeployConfig, users: Sequence[str], actions: Sequence[str]) -> UiSpec | None:
    """The dashboard to deploy (None: none), refusing what cannot be deployed as asked."""
    if not users:
        if actions:
            raise UiAccessError(
                f"--ui-actions {','.join(actions)} names actions for a dashboard that is not deployed: name who may "
                "open it with --ui-users (e.g. group:ml-team@example.com)"
            )
        return None
    if config.ui is None:
        raise UiAccessError("--ui-users names the dashboard's users, but deploy/topology.toml has no [gcp.ui] table")
    parse_users(u for u in users if u != DEPLOYER_PLACEHOLDER)  # a dry run's stand-in for the deploying account
    parse_actions(actions, config.ui)
    return config.ui


DEPLOYER_PLACEHOLDER = "user:DEPLOYING_ACCOUNT"
"""Who may open the dashboard in a dry run where gcloud names no account (a deployment looks it up, or refuses)."""


def deployer_principal(account: str) -> str:
    """The IAM principal of the account `gcloud config get-value account` names (a service account's email ends in
    gserviceaccount.com)."""
    kind = "serviceAccount" if account.endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{account}"


def not_deployed(config: DeployConfig) -> str:
    """What the dry run and the CLI say when --no-ui leaves the dashboard out."""
    name = config.ui.service_name if config.ui else "landfall-ui"
    return f'The dashboard ({name}) is not deployed: --no-ui (docs/deploy.md "The dashboard").'


def for_the_deployer(principal: str) -> str:
    """What the dry run and the CLI say when no --ui-users are named."""
    return (
        f"The dashboard is deployed for {principal} alone, the account running the deploy: name the deployment's "
        "users with --ui-users (e.g. group:ml-team@example.com), or leave the dashboard out with --no-ui."
    )


def how_to_open(spec: UiSpec, n: Names) -> str:
    """How a user named in --ui-users opens the deployed dashboard."""
    return (
        f"`gcloud run services proxy {spec.service_name} --region={n.region} --project={n.project}`, then open "
        "http://localhost:8080 (Google's Cloud Run proxy presents your gcloud identity; you need to be in --ui-users)"
    )


def idle_accounts(config: DeployConfig, users: Sequence[str]) -> frozenset[str]:
    """Service accounts the deployment does not create: the dashboard's, when it is not deployed."""
    return frozenset({config.ui.service_account}) if config.ui and not users else frozenset()


def action_grants(
    kinds: frozenset[str], config: DeployConfig, n: Names, actions: Iterable[str]
) -> list[tuple[str, Arg, str, Resource]]:
    """(holder, member, role, resource) of what the enabled actions add to the dashboard's account, each once."""
    if config.ui is None:
        return []
    holder = config.ui.service_account
    member = iam.account_member(n.accounts[holder])
    rows: dict[tuple[str, Resource], tuple[str, Arg, str, Resource]] = {}
    for name in actions:
        for grant in config.ui.action(name).grants:
            for resource in iam.resolved(grant, config, n):
                if resource.kind in kinds:
                    rows.setdefault((grant.role, resource), (holder, member, grant.role, resource))
    return list(rows.values())


def image_uri(spec: UiSpec, n: Names, tag: str) -> str:
    """The dashboard's image in the default region's repository (the trainer's): R-docker.pkg.dev/P/landfall/ui:T."""
    return f"{n.region}-docker.pkg.dev/{n.project}/{trainer_image().repository}/{spec.image_name}:{tag}"


def service_hosts(spec: UiSpec) -> tuple[str, ...]:
    """The names the deployed dashboard is opened by: its Cloud Run URLs (SERVICE-PROJECT_NUMBER.REGION.run.app, and
    the older SERVICE-HASH-CODE.a.run.app), which Cloud Run alone routes to it, and localhost, where
    `gcloud run services proxy` serves it."""
    return (f"{spec.service_name}-*.run.app", "localhost", "127.0.0.1", "[::1]")


def ui_env(env: Mapping[str, str], actions: Sequence[str], hosts: Sequence[str] = ()) -> dict[str, str]:
    """The service's environment: the settings the functions and the CLI read, the actions it may offer and the
    names it takes them for."""
    return {**env, ACTIONS_ENV: ",".join(actions), **({HOSTS_ENV: ",".join(hosts)} if hosts else {})}


def invoker_policy(users: Sequence[str]) -> dict[str, object]:
    """The service's whole IAM policy: roles/run.invoker for exactly these principals."""
    return {"bindings": [{"role": INVOKER, "members": sorted(users)}]}


def build_config(uri: str) -> dict[str, object]:
    """One docker build of the staged context tagged uri; logs to Cloud Logging only, as a build run by a
    user-specified service account needs (the trainer's build config does the same)."""
    return {
        "steps": [{"id": "ui", "name": DOCKER_BUILDER, "args": ["build", "--tag", uri, "."]}],
        "images": [uri],
        "options": {"logging": "CLOUD_LOGGING_ONLY"},
    }


@dataclass(frozen=True)
class StagedUi:
    """What the dashboard's steps name on disk (relative to the repository root), and its image."""

    context: Path
    build_config: Path
    env_file: Path
    policy_file: Path
    image_uri: str
    missing: tuple[str, ...] = ()
    """NEEDED files this checkout lacks: the image would not build (a deployment refuses; a dry run says so)."""


def stage_ui(
    spec: UiSpec,
    n: Names,
    env: Mapping[str, str],
    users: Sequence[str],
    actions: Sequence[str],
    tag: str = "",
    root: Path = REPO_ROOT,
    out: Path | None = None,
) -> StagedUi:
    """Stage the build context, the build config, the environment and the IAM policy; tag: the image's (default:
    the hash of the staged context, so an unchanged dashboard is not rebuilt)."""
    base = out or root / STAGE_DIR
    context, digest = stage_context("ui", UI_CONTEXT, spec.dockerfile, root, base)
    uri = image_uri(spec, n, tag or digest)
    files = {
        BUILD_CONFIG: json.dumps(build_config(uri), indent=2) + "\n",
        ENV_FILE: env_yaml(ui_env(env, actions, service_hosts(spec))),
        POLICY_FILE: json.dumps(invoker_policy(users), indent=2) + "\n",
    }
    for name, text in files.items():
        (base / name).write_text(text)
    build, env_file, policy = (_from_root(base / name, root) for name in files)
    missing = tuple(path for path in NEEDED if not (root / path).is_file())
    return StagedUi(context, build, env_file, policy, uri, missing)


def deploy_steps(spec: UiSpec, staged: StagedUi, config: DeployConfig, n: Names, users: Sequence[str]) -> list[Step]:
    """Build the image, deploy the service without unauthenticated access, let exactly users invoke it."""
    proj, region = f"--project={n.project}", f"--region={n.region}"
    section = f"The dashboard: Cloud Run service {spec.service_name}, which only --ui-users may invoke (IAM check)"
    builder = f"projects/{n.project}/serviceAccounts/{n.accounts[config.build_account]}"
    return [
        Step(
            f"build the dashboard's image {staged.image_uri} ({spec.dockerfile}; the tag is the hash of the staged "
            "context: an unchanged dashboard is not rebuilt)",
            (
                "gcloud",
                "builds",
                "submit",
                str(staged.context),
                f"--config={staged.build_config}",
                f"--service-account={builder}",
                f"--timeout={config.build_timeout}",
                region,
                proj,
            ),
            section,
            probe=("gcloud", "artifacts", "docker", "images", "describe", staged.image_uri, proj),
            remedy="Read the build log it names; landfall/ui/requirements.txt must install on python:3.13-slim.",
        ),
        Step(
            f"deploy {spec.service_name} as {n.accounts[spec.service_account]}, refusing unauthenticated calls, with "
            f"the settings the CLI reads ({staged.env_file})",
            (
                "gcloud",
                "run",
                "deploy",
                spec.service_name,
                f"--image={staged.image_uri}",
                region,
                f"--service-account={n.accounts[spec.service_account]}",
                "--no-allow-unauthenticated",
                "--invoker-iam-check",
                f"--env-vars-file={staged.env_file}",
                f"--memory={spec.memory}",
                f"--cpu={spec.cpu}",
                f"--min-instances={spec.min_instances}",
                f"--max-instances={spec.max_instances}",
                f"--concurrency={spec.concurrency}",
                f"--timeout={spec.timeout}",
                proj,
            ),
            section,
            remedy="Deploying as the dashboard's account needs roles/iam.serviceAccountUser on it (an Owner has it).",
        ),
        Step(
            f"let exactly {', '.join(sorted(users))} invoke {spec.service_name} ({INVOKER}; the policy in "
            f"{staged.policy_file} replaces the service's, so a principal dropped from --ui-users loses access)",
            ("gcloud", "run", "services", "set-iam-policy", spec.service_name, str(staged.policy_file), region, proj),
            section,
            remedy="Setting a service's IAM policy needs roles/run.admin.",
        ),
    ]


def teardown_steps(config: DeployConfig, n: Names) -> list[Step]:
    """Delete the dashboard's service (its image goes with the repository, its account with the others)."""
    if config.ui is None:
        return []
    where = (config.ui.service_name, f"--region={n.region}", f"--project={n.project}")
    delete = ("gcloud", "run", "services", "delete", *where, "--quiet")
    return [
        Step(
            f"delete the dashboard's Cloud Run service {config.ui.service_name}",
            delete,
            "The dashboard's Cloud Run service (its image goes with the repository, its account with the others)",
            probe=("gcloud", "run", "services", "describe", *where),
            if_found=delete,
            run_if_missing=False,
        )
    ]


def _from_root(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path
