"""`landfall deploy --dry-run` deploys the dashboard as a Cloud Run service that only the
deployment's users reach (Cloud Run's IAM invoker check), its account reads and writes nothing else unless actions are
enabled, and `landfall teardown` removes it.

The checks read the printed commands and the files they name, as a reviewer would (tests/golden/deploy_dry_run.sh
holds the sample's whole script).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from deploy.gcp import ui
from deploy.gcp.bundles import REPO_ROOT, read_env_yaml
from deploy.gcp.config import load_deploy_config
from deploy.gcp.plan import Target, deploy_plan, names, prepare
from deploy.gcp.steps import dry_run_text
from deploy.gcp.teardown import teardown_plan
from functions.settings import settings_from_env
from landfall.cli import main
from tests.golden.dry_runs import SAMPLE

P = SAMPLE.project
UI_SA = f"landfall-ui@{P}.iam.gserviceaccount.com"
SERVICE = "landfall-ui"
READ_ONLY = {
    "roles/datastore.viewer",
    "roles/aiplatform.viewer",
    "roles/storage.objectViewer",
    "roles/logging.viewer",
}
SAMPLE_ARGS = ["--project", P, "--region", SAMPLE.region, "--project-number", SAMPLE.project_number]


@dataclass(frozen=True)
class Rendered:
    """A target's dry run: its commands, and the staged files its dashboard commands name, read at once (a later
    prepare() of another target stages over them)."""

    argvs: list[list[str]]
    files: dict[str, str]

    def service(self) -> list[str]:
        return next(argv for argv in self.argvs if argv[1:3] == ["run", "deploy"])

    def env(self) -> dict[str, str]:
        return read_env_yaml(self.files[flags(self.service())["env-vars-file"]])

    def policy(self) -> object:
        rule = next(argv for argv in self.argvs if argv[1:4] == ["run", "services", "set-iam-policy"])
        return json.loads(self.files[rule[5]])


def commands(target: Target) -> Rendered:
    text = dry_run_text(deploy_plan(target, prepare(target)))
    argvs = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    named = [
        *(flags(argv)["env-vars-file"] for argv in argvs if argv[1:3] == ["run", "deploy"]),
        *(argv[5] for argv in argvs if argv[1:4] == ["run", "services", "set-iam-policy"]),
    ]
    return Rendered(argvs, {path: (REPO_ROOT / path).read_text() for path in named})


def flags(argv: list[str]) -> dict[str, str]:
    pairs = (arg[2:].partition("=") for arg in argv if arg.startswith("--"))
    return {key: value for key, _, value in pairs}


def ui_roles(deployed: list[list[str]]) -> set[tuple[str, str]]:
    """(role, resource) of every grant to the dashboard's account."""
    return {
        (flags(argv)["role"], argv[3] if argv[1] == "projects" else argv[4].removeprefix("gs://"))
        for argv in deployed
        if "add-iam-policy-binding" in argv and flags(argv).get("member") == f"serviceAccount:{UI_SA}"
    }


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return commands(SAMPLE)


@pytest.fixture(scope="module")
def deployed(rendered: Rendered) -> list[list[str]]:
    return rendered.argvs


def test_the_service_refuses_unauthenticated_calls_and_runs_as_its_own_account(deployed: list[list[str]]) -> None:
    services = [argv for argv in deployed if argv[1:3] == ["run", "deploy"]]
    assert [argv[3] for argv in services] == [SERVICE]
    f = flags(services[0])
    assert "no-allow-unauthenticated" in f and "allow-unauthenticated" not in f
    assert "invoker-iam-check" in f and "no-invoker-iam-check" not in f, "the check on, even if someone turned it off"
    assert f["service-account"] == UI_SA
    assert f["image"] == f"{SAMPLE.region}-docker.pkg.dev/{P}/landfall/ui:{SAMPLE.image_tag}"
    text = " ".join(shlex.join(argv) for argv in deployed)
    assert "allUsers" not in text and "allAuthenticatedUsers" not in text
    assert "run.googleapis.com" in deployed[0], "Cloud Run's API is enabled with the others"
    assert not any("iap" in word for word in deployed[0]), "no IAP: the IAM invoker check needs no other API"


def test_the_invoker_rule_names_exactly_the_configured_users(rendered: Rendered) -> None:
    """The service's whole policy is set (not a binding added), so it holds the users given and no one else."""
    deployed = rendered.argvs
    rules = [argv for argv in deployed if argv[1:4] == ["run", "services", "set-iam-policy"]]
    assert [argv[4] for argv in rules] == [SERVICE]
    assert rendered.policy() == {"bindings": [{"role": "roles/run.invoker", "members": sorted(SAMPLE.ui_users)}]}
    assert not any(argv[1:3] == ["run", "services"] and "add-iam-policy-binding" in argv for argv in deployed)
    # the rule comes after the service it is set on
    position = {argv[1:4].__repr__(): i for i, argv in enumerate(deployed) if argv[1:3] == ["run", "deploy"]}
    assert max(position.values()) < deployed.index(rules[0])


def test_a_user_dropped_from_ui_users_loses_access_on_the_next_deploy() -> None:
    fewer = replace(SAMPLE, ui_users=("user:ana@example.com",))
    assert commands(fewer).policy() == {
        "bindings": [{"role": "roles/run.invoker", "members": ["user:ana@example.com"]}]
    }


def test_the_dashboards_account_only_reads_unless_actions_are_enabled(rendered: Rendered) -> None:
    roles = ui_roles(rendered.argvs)
    assert {role for role, _ in roles} == READ_ONLY
    assert all(role.lower().endswith("viewer") for role, _ in roles)
    assert rendered.env()[ui.ACTIONS_ENV] == "", "read-only: the dashboard offers no action"


@pytest.mark.parametrize(
    ("actions", "added"),
    [
        (("cancel",), {("roles/datastore.user", P), ("roles/aiplatform.user", P)}),
        (("retry",), {("roles/datastore.user", P), ("roles/pubsub.publisher", "landfall-training-requests")}),
        (
            ("cancel", "retry"),
            {
                ("roles/datastore.user", P),
                ("roles/aiplatform.user", P),
                ("roles/pubsub.publisher", "landfall-training-requests"),
            },
        ),
    ],
)
def test_each_enabled_action_adds_what_its_command_needs_and_nothing_more(
    deployed: list[list[str]], actions: tuple[str, ...], added: set[tuple[str, str]]
) -> None:
    rendered = commands(replace(SAMPLE, ui_actions=actions))
    with_actions = rendered.argvs
    assert ui_roles(with_actions) - ui_roles(deployed) == added
    writes = [
        a
        for a in with_actions
        if flags(a).get("role") == "roles/datastore.user" and flags(a)["member"] == f"serviceAccount:{UI_SA}"
    ]
    assert len(writes) == 1 and "databases/(default)" in flags(writes[0])["condition"], "Landfall's database only"
    assert rendered.env()[ui.ACTIONS_ENV] == ",".join(actions)


def test_the_service_reads_the_settings_the_cli_reads(rendered: Rendered) -> None:
    env = rendered.env()
    settings = settings_from_env(env)
    assert settings.project == P
    assert settings.landing_bucket == f"{P}-landfall-landing"
    assert dict(settings.artifact_buckets) == {
        r: f"{P}-landfall-artifacts-{r}" for r in ("us-central1", "europe-west4")
    }
    recorded = read_env_yaml((REPO_ROOT / ".landfall/deploy/projects" / f"{P}.env.yaml").read_text())
    # every prepare() records the time it staged (LANDFALL_DEPLOYED_AT): another test's may have written it since
    apart = (ui.ACTIONS_ENV, ui.HOSTS_ENV, "LANDFALL_DEPLOYED_AT")
    assert {k: v for k, v in env.items() if k not in apart} == {k: v for k, v in recorded.items() if k not in apart}, (
        "the functions' settings, as recorded"
    )
    assert settings.deployed_at is not None and "LANDFALL_DEPLOYED_AT" in recorded
    assert env[ui.HOSTS_ENV] == "landfall-ui-*.run.app,localhost,127.0.0.1,[::1]", "its Cloud Run names and the proxy's"


def test_with_no_ui_no_dashboard_is_deployed_and_the_dry_run_says_so() -> None:
    target = replace(SAMPLE, ui_users=())
    text = dry_run_text(deploy_plan(target, prepare(target)))
    assert "The dashboard (landfall-ui) is not deployed: --no-ui" in text
    assert "gcloud run " not in text and UI_SA not in text, "no service, no account, no grant"


def test_teardown_removes_the_service_and_whatever_an_action_granted() -> None:
    text = dry_run_text(teardown_plan(SAMPLE))
    lines = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    deletes = [i for i, a in enumerate(lines) if a[1:4] == ["run", "services", "delete"]]
    assert [lines[i][4] for i in deletes] == [SERVICE] and "--quiet" in lines[deletes[0]]
    account = next(i for i, a in enumerate(lines) if a[1:4] == ["iam", "service-accounts", "delete"] and a[4] == UI_SA)
    assert deletes[0] < account, "the service goes before the account it runs as"
    removed = {flags(a)["role"] for a in lines if a[1:3] == ["projects", "remove-iam-policy-binding"] and UI_SA in a[4]}
    assert removed == {"roles/datastore.viewer", "roles/aiplatform.viewer", "roles/logging.viewer"} | {
        "roles/datastore.user",
        "roles/aiplatform.user",
    }, "teardown does not know which actions a deployment enabled: it removes every one's project grants it finds"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ui-users", "allUsers"], "would let anyone open the dashboard"),
        (["--ui-users", "allAuthenticatedUsers"], "would let anyone open the dashboard"),
        (["--ui-users", "ana@example.com"], "is not an IAM principal; expected user:EMAIL, group:EMAIL"),
        (["--no-ui", "--ui-actions", "cancel"], "names actions for a dashboard that is not deployed"),
        (["--no-ui", "--ui-users", "user:ana@example.com"], "--no-ui leaves the dashboard out"),
        (["--ui-users", "user:ana@example.com", "--ui-actions", "delete"], "known: cancel, retry"),
    ],
)
def test_a_deploy_refuses_access_it_cannot_give_as_asked(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", *SAMPLE_ARGS, *args, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err


def test_users_repeated_or_in_comma_lists_are_granted_once_each() -> None:
    assert ui.parse_users(
        ["group:a@example.com,user:b@example.com", "group:a@example.com", " domain:example.com "]
    ) == (
        "group:a@example.com",
        "user:b@example.com",
        "domain:example.com",
    )


def test_a_deploy_with_no_ui_says_on_stderr_that_it_leaves_the_dashboard_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["deploy", *SAMPLE_ARGS, "--no-ui", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "gcloud run deploy" not in out
    assert "The dashboard (landfall-ui) is not deployed: --no-ui" in err


def _gcloud_account(monkeypatch: pytest.MonkeyPatch, account: str | None) -> None:
    """What `gcloud config get-value account` prints (None: no gcloud on PATH)."""
    import subprocess

    import landfall.commands.deploy as command

    monkeypatch.setattr(command.shutil, "which", lambda name: None if account is None else f"/usr/bin/{name}")
    done = subprocess.CompletedProcess(["gcloud"], 0, stdout=f"{account}\n", stderr="")
    monkeypatch.setattr(command.subprocess, "run", lambda *_a, **_k: done)


@pytest.mark.parametrize(
    ("account", "principal"),
    [
        ("ana@example.com", "user:ana@example.com"),
        ("ci@p.iam.gserviceaccount.com", "serviceAccount:ci@p.iam.gserviceaccount.com"),
        (None, ui.DEPLOYER_PLACEHOLDER),
        ("", ui.DEPLOYER_PLACEHOLDER),
    ],
)
def test_without_users_the_dashboard_is_for_the_deploying_account(
    account: str | None, principal: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gcloud_account(monkeypatch, account)
    assert main(["deploy", *SAMPLE_ARGS, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "gcloud run deploy landfall-ui" in out and "--no-allow-unauthenticated" in out
    assert f"The dashboard is deployed for {principal} alone, the account running the deploy" in err
    policy = json.loads((REPO_ROOT / ".landfall/deploy" / ui.POLICY_FILE).read_text())
    assert policy == {"bindings": [{"role": ui.INVOKER, "members": [principal]}]}


def test_a_real_deploy_without_users_refuses_when_gcloud_names_no_account(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import landfall.commands.deploy as command

    _gcloud_account(monkeypatch, "")
    monkeypatch.setattr(command, "_execute", lambda *_: pytest.fail("gcloud must not run"))
    assert main(["deploy", *SAMPLE_ARGS]) == 2
    assert "gcloud names no account to let open the dashboard: `gcloud auth login`" in capsys.readouterr().err


def test_a_real_deploy_refuses_a_checkout_without_the_dashboards_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any gcloud command runs: the image would not build without landfall/ui/ (`python -m landfall.ui` and
    its pins)."""
    import landfall.commands.deploy as command

    monkeypatch.setattr(ui, "NEEDED", ("landfall/ui/no-such-file.txt",))
    monkeypatch.setattr(command, "_execute", lambda *_: pytest.fail("gcloud must not run"))
    assert main(["deploy", *SAMPLE_ARGS, "--ui-users", "group:ml-team@example.com"]) == 2
    err = capsys.readouterr().err
    assert "the dashboard's image needs landfall/ui/no-such-file.txt, which this checkout lacks" in err


def test_a_deploy_with_the_dashboard_ends_by_saying_how_to_open_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import landfall.commands.deploy as command

    monkeypatch.setattr(ui, "NEEDED", ())
    monkeypatch.setattr(command, "_execute", lambda *_: [])  # what gcloud would do is tested above and in execute
    assert main(["deploy", *SAMPLE_ARGS, "--ui-users", "group:ml-team@example.com"]) == 0
    err = capsys.readouterr().err
    assert (
        f"open the dashboard with `gcloud run services proxy {SERVICE} --region={SAMPLE.region} --project={P}`, "
        "then open http://localhost:8080"
    ) in err


# --- the container -------------------------------------------------------------------------------------------------


def dockerfile() -> str:
    spec = load_deploy_config().ui
    assert spec is not None
    return (REPO_ROOT / spec.dockerfile).read_text()


def test_the_context_is_exactly_what_the_dockerfile_copies(tmp_path: Path) -> None:
    spec = load_deploy_config().ui
    assert spec is not None
    staged_ui = ui.stage_ui(spec, names(SAMPLE), {}, SAMPLE.ui_users, (), out=tmp_path)
    folder = staged_ui.context if staged_ui.context.is_absolute() else REPO_ROOT / staged_ui.context
    copied = [line.split()[1].rstrip("/") for line in dockerfile().splitlines() if line.startswith("COPY ")]
    assert set(copied) == {"functions/requirements.txt", "landfall/ui/requirements.txt", *ui.UI_CONTEXT}
    top = {p.relative_to(folder).parts[0] for p in folder.rglob("*") if p.is_file()}
    assert top == {"Dockerfile", ".gcloudignore", *ui.UI_CONTEXT}
    assert not any("__pycache__" in p.parts or "tests" in p.parts for p in folder.rglob("*"))
    ignore = (REPO_ROOT / "deploy/ui/Dockerfile.dockerignore").read_text().splitlines()
    assert {line[1:].rstrip("/") for line in ignore if line.startswith("!")} == set(ui.UI_CONTEXT)
    again = ui.stage_ui(spec, names(SAMPLE), {}, SAMPLE.ui_users, (), out=tmp_path)
    assert again.image_uri == staged_ui.image_uri, "the tag is the content hash: same content, same tag"
    assert re.search(r"/landfall/ui:[0-9a-f]{16}$", staged_ui.image_uri)


def test_the_image_serves_the_dashboard_on_cloud_runs_port_with_the_functions_python() -> None:
    text = dockerfile()
    assert "pip install -r functions/requirements.txt -r landfall/ui/requirements.txt" in text
    cmd = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert cmd, "an exec-form CMD"
    assert 'exec python -m landfall.ui --host 0.0.0.0 --port "${PORT:-8080}"' in json.loads(cmd.group(1))
    base = re.search(r"^FROM python:(\d+)\.(\d+)-slim$", text, re.MULTILINE)
    assert base and f"python{base.group(1)}{base.group(2)}" == load_deploy_config().runtime
    assert re.search(r"^USER \d+$", text, re.MULTILINE), "not root"


def test_the_missing_package_is_named_when_a_checkout_lacks_it(tmp_path: Path) -> None:
    spec = load_deploy_config().ui
    assert spec is not None
    (tmp_path / "deploy/ui").mkdir(parents=True)
    (tmp_path / spec.dockerfile).write_text((REPO_ROOT / spec.dockerfile).read_text())
    staged_ui = ui.stage_ui(spec, names(SAMPLE), {}, SAMPLE.ui_users, (), root=tmp_path)
    assert staged_ui.missing == ui.NEEDED


def test_the_deployable_actions_are_the_ones_the_dashboard_knows() -> None:
    """One list: [gcp.ui.actions.*] grants what each LANDFALL_UI_ACTIONS entry the dashboard accepts needs."""
    source = pytest.importorskip("landfall.ui.source", reason="the dashboard's package is not in this checkout")
    spec = load_deploy_config().ui
    assert spec is not None
    assert {a.name for a in spec.actions} == set(source.KNOWN_ACTIONS)
    assert source.ACTIONS_ENV == ui.ACTIONS_ENV
    hosts = pytest.importorskip("landfall.ui.hosts")
    assert hosts.HOSTS_ENV == ui.HOSTS_ENV
    assert hosts.allowed_hosts({ui.HOSTS_ENV: ",".join(ui.service_hosts(spec))}) == ui.service_hosts(spec)
    assert ui.service_hosts(spec)[1:] == hosts.LOOPBACK, "the proxy's names are the dashboard's loopback names"
