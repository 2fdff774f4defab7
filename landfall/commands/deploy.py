"""`landfall deploy` and `landfall teardown`: Landfall in a Google Cloud project, from deploy/topology.toml."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from typing import Any

from deploy.gcp.execute import LOCAL_STACK_VARIABLES, Executor, StepError, run_gcloud
from deploy.gcp.plan import Target, deploy_plan, prepare
from deploy.gcp.steps import dry_run_text
from deploy.gcp.teardown import teardown_plan
from deploy.gcp.ui import UiAccessError

EXIT_KEPT = 3
"""teardown finished but kept a bucket that holds objects (run again with --delete-data to delete it)."""


class UsageError(ValueError):
    pass


def _target(args: argparse.Namespace) -> Target:
    if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", args.project):
        raise UsageError(
            f"--project {args.project!r} is not a project id (6 to 30 lowercase letters, digits and "
            "hyphens); `gcloud projects list` shows yours"
        )
    if args.project_number and not args.project_number.isdigit():
        raise UsageError(f"--project-number must be digits, got {args.project_number!r}")
    from deploy.gcp import ui
    from deploy.gcp.config import load_deploy_config
    from deploy.topology import load_topology

    users = ui.parse_users(getattr(args, "ui_users", []))
    if getattr(args, "no_ui", False):
        if users:
            raise UsageError("--no-ui leaves the dashboard out, so it takes no --ui-users: pass one or the other")
    elif not users and hasattr(args, "ui_users"):  # deploy (teardown removes the dashboard whoever it was for)
        users = (_deployer(dry_run=args.dry_run),)
    actions = ui.parse_actions(getattr(args, "ui_actions", []), load_deploy_config().ui)
    ui.check(load_deploy_config(), users, actions)
    return Target(
        project=args.project,
        region=args.region or load_topology().default_region,
        project_number=args.project_number or "",
        job_regions=tuple(args.job_region),
        image_tag=getattr(args, "image_tag", "") or "",
        delete_data=getattr(args, "delete_data", False),
        ui_users=users,
        ui_actions=actions,
    )


def _deployer(*, dry_run: bool) -> str:
    """The principal of the account gcloud deploys as: who may open the dashboard when --ui-users names no one."""
    from deploy.gcp import ui

    account = ""
    if shutil.which("gcloud") is not None:
        try:
            done = subprocess.run(
                ["gcloud", "config", "get-value", "account"], capture_output=True, text=True, timeout=60, check=False
            )
            account = done.stdout.strip() if done.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            account = ""
    if account and "@" in account:
        principal = ui.deployer_principal(account)
    elif dry_run:
        principal = ui.DEPLOYER_PLACEHOLDER
    else:
        raise UsageError(
            "no --ui-users, and gcloud names no account to let open the dashboard: `gcloud auth login`, name the "
            "deployment's users with --ui-users (e.g. group:ml-team@example.com), or leave it out with --no-ui"
        )
    print(f"# {ui.for_the_deployer(principal)}", file=sys.stderr)
    return principal


def _execute(plan: Any, target: Target) -> list[Any]:
    if shutil.which("gcloud") is None:
        raise UsageError(
            "gcloud is not on PATH: install the Google Cloud CLI (cloud.google.com/sdk) and run `gcloud auth login`"
        )
    leaked = [name for name in LOCAL_STACK_VARIABLES if name in os.environ]
    if leaked:
        print(
            f"# ignoring the local stack's {', '.join(leaked)} (from .landfall/env): gcloud talks to Google Cloud",
            file=sys.stderr,
        )
    from deploy.gcp.bundles import REPO_ROOT

    executor = Executor(plan, run_gcloud(REPO_ROOT), report=lambda line: print(line, file=sys.stderr))
    if target.project_number:
        executor.known["project_number"] = target.project_number
    return executor.run()


def cmd_deploy(args: argparse.Namespace) -> int:
    from deploy.gcp import ui
    from deploy.gcp.config import load_deploy_config
    from deploy.gcp.plan import names

    try:
        target = _target(args)
        prepared = prepare(target)
        plan = deploy_plan(target, prepared)
        dashboard = load_deploy_config().ui if prepared.ui else None
        if prepared.ui is None:
            print(f"# {ui.not_deployed(load_deploy_config())}", file=sys.stderr)
        elif prepared.ui.missing:
            missing = ", ".join(prepared.ui.missing)
            if not args.dry_run:
                raise UsageError(
                    f"the dashboard's image needs {missing}, which this checkout lacks (package landfall/ui/); "
                    "deploy a checkout that has it, or pass --no-ui to deploy without the dashboard"
                )
            print(f"# this checkout lacks {missing}: the dashboard's image build would fail", file=sys.stderr)
        if args.dry_run:
            print(dry_run_text(plan), end="")
            staged = " and the dashboard's context" if prepared.ui else ""
            print(
                f"# staged {len(prepared.bundles)} function bundles, the trainer context{staged} under "
                ".landfall/deploy/",
                file=sys.stderr,
            )
            return 0
        _execute(plan, target)
    except (UsageError, StepError, UiAccessError) as exc:
        print(f"landfall deploy: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, StepError) else 2
    print(
        f"landfall deploy: done. Drop data with `gcloud storage cp FILES gs://{prepared.env['LANDFALL_LANDING_BUCKET']}"
        "/datasets/NAME/` and a _SUCCESS marker.",
        file=sys.stderr,
    )
    if dashboard is not None:
        print(f"landfall deploy: open the dashboard with {ui.how_to_open(dashboard, names(target))}.", file=sys.stderr)
    return 0


def cmd_teardown(args: argparse.Namespace) -> int:
    try:
        target = _target(args)
        plan = teardown_plan(target)
        if args.dry_run:
            print(dry_run_text(plan), end="")
            return 0
        outcomes = _execute(plan, target)
    except (UsageError, StepError, UiAccessError) as exc:
        print(f"landfall teardown: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    kept = [o for o in outcomes if o.action == "kept"]
    for outcome in kept:
        print(f"landfall teardown: kept: {outcome.detail}", file=sys.stderr)
    return EXIT_KEPT if kept else 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", required=True, help="the Google Cloud project id")
    p.add_argument(
        "--region",
        help="region of the functions, buckets, image and schedules (default: "
        "deploy/topology.toml project.default_region)",
    )
    p.add_argument(
        "--project-number",
        default="",
        metavar="N",
        help="the project number, in the Google-managed identities' names (default: looked up when deploying; "
        "a dry run prints PROJECT_NUMBER in its place)",
    )
    p.add_argument(
        "--job-region",
        action="append",
        default=[],
        metavar="REGION",
        help="another region Vertex jobs may run in (an artifacts bucket each); repeatable",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="run nothing: print the gcloud commands, one per line, as a bash script"
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "deploy",
        help="deploy Landfall to a Google Cloud project (gcloud); converges when run again",
        description="Render deploy/topology.toml into the gcloud commands that create or update APIs, service "
        "accounts and grants, buckets, topics and subscriptions, the bucket notification, the trainer "
        "image, the functions, the log sink, the schedules and Firestore, and the dashboard (a Cloud Run "
        "service only --ui-users may invoke), and run them in order. Each resource is described first and "
        "updated or left alone when it exists. Function bundles and the images' build contexts are staged "
        "under .landfall/deploy/.",
    )
    _common(p)
    p.add_argument(
        "--image-tag",
        default="",
        metavar="TAG",
        help="tag of the trainer and dashboard images (default: the hash of each staged build context)",
    )
    p.add_argument(
        "--ui-users",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="who may open the dashboard (Cloud Run service landfall-ui, roles/run.invoker): user:EMAIL, "
        "group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN; repeatable or a comma list. Default: the account "
        "gcloud deploys as (`gcloud config get-value account`)",
    )
    p.add_argument("--no-ui", action="store_true", help="deploy without the dashboard")
    p.add_argument(
        "--ui-actions",
        action="append",
        default=[],
        metavar="ACTIONS",
        help="what the dashboard may do besides reading, a comma list of cancel, retry (LANDFALL_UI_ACTIONS; "
        "each adds the roles its command needs to the dashboard's account); default: read-only",
    )
    p.set_defaults(func=cmd_deploy)
    t = sub.add_parser(
        "teardown",
        help="remove what `landfall deploy` made; keeps buckets that hold objects",
        description="Delete the schedules, log sink, notifications, subscriptions, functions, the dashboard's "
        "service, topics, service "
        "accounts and their project grants, the image repository and empty buckets. A bucket that "
        f"holds objects is kept (exit status {EXIT_KEPT}) unless --delete-data, which also deletes the "
        "Firestore database. APIs stay enabled.",
    )
    _common(t)
    t.add_argument(
        "--delete-data", action="store_true", help="also delete buckets with their objects and the Firestore database"
    )
    t.set_defaults(func=cmd_teardown)
