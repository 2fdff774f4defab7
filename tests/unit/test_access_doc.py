"""docs/access.md is what the deploy configuration grants (deploy/gcp/access.py writes it)."""

from __future__ import annotations

from dataclasses import replace

from deploy.gcp.access import ACCESS_DOC, access_markdown
from deploy.gcp.config import load_deploy_config
from deploy.teams import read_teams


def test_the_access_page_matches_the_topology_and_teams() -> None:
    written = ACCESS_DOC.read_text()
    assert written == access_markdown(load_deploy_config(), read_teams()), (
        "docs/access.md is out of date: run `python -m deploy.gcp.access`"
    )


def test_every_account_and_every_grant_is_on_the_page_and_a_removed_grant_leaves_it() -> None:
    config = load_deploy_config()
    page = access_markdown(config, read_teams())
    for account in config.service_accounts:
        section = page.split(f"### `{account.account_id}` ({account.key})", 1)[1].split("\n### ", 1)[0]
        rows = [line for line in section.splitlines() if line.startswith("| `roles/")]
        assert [r.split("`")[1] for r in rows] == [g.role for g in account.grants], account.key
    dispatch = next(a for a in config.service_accounts if a.key == "dispatch")
    fewer = replace(dispatch, grants=tuple(g for g in dispatch.grants if g.role != "roles/aiplatform.user"))
    accounts = tuple(fewer if a.key == "dispatch" else a for a in config.service_accounts)
    changed = access_markdown(replace(config, service_accounts=accounts), read_teams())
    section = changed.split("### `landfall-dispatch` (dispatch)", 1)[1].split("\n### ", 1)[0]
    assert "roles/aiplatform.user" not in section and changed != page
