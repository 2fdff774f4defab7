"""What each function's identity used on the enforcing local stack, against what the deploy grants it.

Cloud Storage calls are checked by the storage gate, every Vertex AI call (with acting as a job's
account) by the Vertex emulator through it, publishes by the Pub/Sub gate; each records every decision.

The stack's storage gate records every permission each principal used and the grant that allowed it (or that none
did) in the state folder (deploy/local/stack.py IAM_RECORD). Over a whole end-to-end suite, a function's account must
have been refused nothing (a grant missing from deploy/topology.toml), and must have used every Cloud Storage and
Pub/Sub publisher grant it holds (one it never used is one it does not need).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy.gcp.config import load_deploy_config
from deploy.local.stack import IAM_RECORD
from deploy.local_iam.policy import deployed_policy, local_names, role_permissions
from deploy.teams import read_teams
from deploy.topology import account_email, function_account, load_topology

PUBLISH = "pubsub.topics.publish"
"""The Pub/Sub permission the stack's Pub/Sub gate checks (deploy/local_iam/pubsub_gate.py)."""
BACKGROUND_BUCKET_READ = "storage.buckets.get"
"""google-cloud-storage reads each bucket's metadata on a background thread for its own telemetry and carries on when
refused (google/cloud/storage/_bucket_metadata_cache.py): no Landfall code asks for it, and no account needs it."""


def function_members(project: str) -> dict[str, str]:
    """serviceAccount:EMAIL -> the function running as it, for every function on the stack."""
    return {
        f"serviceAccount:{account_email(function_account(f.name), project)}": f.name for f in load_topology().functions
    }


def refused_calls(state_dir: Path, env: Mapping[str, str]) -> list[str]:
    """Each permission a function's account or the shared trainer account (Landfall's own trainer, and code of no
    team) was refused, and each call of theirs the gate could not map to a permission (but the library's own bucket
    read)."""
    project = env["GOOGLE_CLOUD_PROJECT"]
    members = {**function_members(project), f"serviceAccount:{account_email('trainer', project)}": "the trainer"}
    unknown = [
        f"{members[x['member']]} ({x['member']}) made {x['call']}, a call the storage gate cannot check"
        for x in _lines(state_dir)
        if x.get("unknown") and x["member"] in members
    ]
    return unknown + [
        f"{members[x['member']]} ({x['member']}) was refused {x['permission']} on {_where(x)}"
        for x in _lines(state_dir)
        if not x["allowed"]
        and not x.get("unknown")
        and x["member"] in members
        and x["permission"] != BACKGROUND_BUCKET_READ
    ]


def unused_grants(state_dir: Path, env: Mapping[str, str]) -> list[str]:
    """Each Cloud Storage or Pub/Sub publisher grant of a function's account that no call used."""
    topology, config = load_topology(), load_deploy_config()
    artifacts = dict(pair.split("=", 1) for pair in env["LANDFALL_ARTIFACT_BUCKETS"].split(","))
    names = local_names(topology, config, artifacts, env["LANDFALL_LANDING_BUCKET"], env["LANDFALL_CODE_BUCKET"])
    policy = deployed_policy(config, names, read_teams(env.get("LANDFALL_TEAMS_FILE", "")), topology.runs_prefix)
    members = function_members(env["GOOGLE_CLOUD_PROJECT"])
    used = {(x["member"], x["role"], x["resource"]) for x in _lines(state_dir) if x["allowed"] and "role" in x}
    checked = {
        role for role, held in role_permissions().items() if any(p.startswith("storage.") or p == PUBLISH for p in held)
    }
    return [
        f"{members[b.member]} ({b.member}) holds {b.describe()} and never used it"
        for b in policy.bindings
        if b.member in members and b.role in checked and (b.member, b.role, b.resource.name) not in used
    ]


def _where(line: dict[str, Any]) -> str:
    if "bucket" in line:
        return f"gs://{line['bucket']}/{line.get('object') or ''}"
    return f"{line.get('kind')} {line.get('name')}"


def _lines(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / IAM_RECORD
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


__all__ = ["function_members", "refused_calls", "unused_grants"]
