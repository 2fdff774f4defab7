"""Teams through the dispatcher, the listener and the reconciler, against the fakes (docs/teams.md): the claim and the
team's ledger in one step, WAITING team-cap / team-budget, REJECTED above a hard limit, the reservation settled once
when the run ends, waiting runs retried by priority, and a run over its own budget while running cancelled."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from deploy.teams import Teams, parse_teams
from functions.dispatch.team_rules import team_of
from functions.reconciler.handler import reconcile, reconcile_run
from functions.reconciler.team_looks import TeamLooks
from schemas.plan import Plan
from schemas.run_record import RunState
from schemas.training_request import parse_training_request
from tests.fakes.teams import FakeLedger, FakeSettlingRuns
from tests.fakes.world import PLAN, REQUEST_JSON, Outcome, World


def gpu_plan(gpus: int) -> Plan:
    """The world's plan on `gpus` T4s (one process each)."""
    return replace(
        PLAN,
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=gpus,
        replica_count=1,
        micro_batch_size=PLAN.global_batch_size // gpus // PLAN.gradient_accumulation_steps,
    )


GPU_PLAN = gpu_plan(2)
TEAMS = """
[[teams]]
name = "churn"
owns = [{bucket = "landfall-landing", prefix = "datasets/churn/"}]
priority = 5
monthly_budget_usd = BUDGET
requests_topic = "landfall-requests-churn"
[teams.gpu_cap]
NVIDIA_TESLA_T4 = 3

[[teams]]
name = "other"
owns = [{prefix = "datasets/other/"}]
monthly_budget_usd = 1000
"""


def _teams(budget: float = 100.0) -> Teams:
    return parse_teams(tomllib.loads(TEAMS.replace("BUDGET", str(budget))))


def request(n: int, *, budget_usd: float = 0.0) -> bytes:
    raw = json.loads(REQUEST_JSON)
    raw["idempotency_key"] = f"{raw['idempotency_key']}-{n}"
    raw["constraints"]["budget_usd"] = budget_usd
    return json.dumps(raw).encode()


def run_id(n: int) -> str:
    return parse_training_request(request(n)).run_id


def world(budget: float = 100.0, plan: object = GPU_PLAN) -> tuple[World, FakeLedger]:
    runs = FakeSettlingRuns()
    w = World(outcome=Outcome(plan, ()), runs=runs)  # type: ignore[arg-type]
    ledger = FakeLedger(runs, w.clock)
    runs.ledger = ledger
    # The fake world's requests are ingest's (their data dropped under the team's prefix): charged to the team.
    w.dispatch_deps = replace(w.dispatch_deps, teams=_teams(budget), ledger=ledger, ingested=lambda request: True)
    return w, ledger


def test_the_first_run_reserves_its_estimate_and_gpus_in_the_claim() -> None:
    w, ledger = world()
    assert w.deliver(request(1)) == "submitted"
    run = w.run(run_id(1))
    assert run.team is not None and run.team.name == "churn" and run.team.via == "route" and run.team.held
    assert run.team.gpus == {"NVIDIA_TESLA_T4": 2} and run.team.reserved_usd == GPU_PLAN.estimated_cost_usd
    stored = ledger.ledger("churn")
    assert stored is not None and stored.gpus == {"NVIDIA_TESLA_T4": 2}
    assert stored.month(run.team.month).reserved_usd == GPU_PLAN.estimated_cost_usd


def test_a_run_past_the_cap_waits_team_cap_and_goes_once_gpus_free() -> None:
    w, ledger = world()
    assert w.deliver(request(1)) == "submitted"
    assert w.deliver(request(2), message_id="m-2") == "waiting:team-cap"
    second = w.run(run_id(2))
    assert second.state == RunState.WAITING and second.submission.waiting is not None
    assert second.submission.waiting.reason == "team-cap"
    assert "has 2 of its 3 GPUs (NVIDIA_TESLA_T4) in flight" in (second.submission.waiting.note or "")
    assert second.submission.owner == "" and second.vertex is None and len(w.vertex.jobs) == 1
    assert second.team is not None and not second.team.held

    # The first run's job ends: the listener records it, and its reservation is settled once (repeated events too).
    name = w.job_name(run_id(1))
    job_id = name.rsplit("/", 1)[-1]
    started = w.clock.now
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=started, end=started + timedelta(hours=1))
    w.clock.now = started + timedelta(hours=1)
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    after = ledger.ledger("churn")
    first = w.run(run_id(1))
    assert after is not None and after.gpus == {} and first.team is not None and not first.team.held
    spend = after.month(first.team.month)
    assert spend.reserved_usd == 0.0 and spend.settled_usd == first.cost.actual_usd == GPU_PLAN.hourly_cost_usd

    # The reconciler retries the waiting run once its retry time has come; now it fits.
    w.clock.now += timedelta(seconds=w.dispatch_deps.settings.wait_backoff_seconds)
    deps = replace(w.reconciler_deps(), listener=replace(w.listener_deps), resubmit=_resubmit(w))
    assert reconcile_run(w.run(run_id(2)), deps).startswith("resubmitted:")
    again = w.run(run_id(2))
    assert again.state == RunState.SUBMITTED and again.team is not None and again.team.held


def _resubmit(w: World) -> Callable[[str], str]:
    from functions.dispatch.handler import resubmit

    return lambda rid: resubmit(rid, w.dispatch_deps)


def test_a_run_past_the_monthly_budget_waits_team_budget() -> None:
    w, _ = world(budget=GPU_PLAN.estimated_cost_usd * 1.5)
    assert w.deliver(request(1)) == "submitted"
    w.dispatch_deps = replace(w.dispatch_deps, teams=_teams(GPU_PLAN.estimated_cost_usd * 1.5))
    cheap = gpu_plan(1)
    w.outcome = Outcome(cheap, ())
    assert w.deliver(request(2), message_id="m-2") == "waiting:team-budget"
    waiting = w.run(run_id(2)).submission.waiting
    assert waiting is not None and waiting.reason == "team-budget" and "monthly budget" in (waiting.note or "")


def test_a_run_above_a_hard_limit_is_rejected_with_what_to_do() -> None:
    w, ledger = world(plan=gpu_plan(4))
    assert w.deliver(request(1)) == "rejected:team-limit"
    run = w.run(run_id(1))
    assert run.state == RunState.REJECTED and run.error is not None and run.error.code == "team-limit"
    assert "above team 'churn''s cap of 3 GPUs" in run.error.message and "constraints.max_gpus" in run.error.message
    assert ledger.ledger("churn") is None and not w.vertex.jobs
    w2, _ = world(budget=GPU_PLAN.estimated_cost_usd / 2)
    assert w2.deliver(request(1)) == "rejected:team-limit"
    assert "hard limit" in (w2.run(run_id(1)).error or run.error).message


def test_no_teams_is_todays_behaviour() -> None:
    w = World(outcome=Outcome(GPU_PLAN, ()))
    assert w.deliver(request(1)) == "submitted" and w.deliver(request(2), message_id="m-2") == "submitted"
    assert w.run(run_id(1)).team is None


def test_the_team_comes_from_the_topic_and_data_outside_its_prefixes_is_rejected() -> None:
    teams = _teams()
    churn = parse_training_request(request(1))
    charge, refused = team_of(churn, teams, topic="projects/p/topics/landfall-requests-churn")
    assert refused is None and charge is not None and (charge.name, charge.via) == ("churn", "topic")
    raw = json.loads(request(3))
    raw["dataset"] = {"uri": "gs://landfall-landing/datasets/other/x/"}
    other = parse_training_request(json.dumps(raw).encode())
    charge, refused = team_of(other, teams, topic="landfall-requests-churn")
    assert charge is None and refused is not None and refused.code == "team-prefix"
    assert "outside the team's prefixes (gs://landfall-landing/datasets/churn/)" in refused.reason
    charge, refused = team_of(other, teams, ingested=lambda r: True)  # ingest's request: the data's owner
    assert refused is None and charge is not None and (charge.name, charge.via) == ("other", "route")
    raw["dataset"] = {"uri": "gs://landfall-landing/elsewhere/x/"}
    nobody = parse_training_request(json.dumps(raw).encode())
    assert teams.unowned == "reject"  # the default once the file has teams
    refused = team_of(nobody, teams)[1]
    assert refused is not None and refused.code == "team-unowned-data"
    assert team_of(nobody, replace(teams, unowned="allow")) == (None, None)


def test_a_request_on_the_shared_topic_for_a_teams_data_is_never_charged_to_it() -> None:
    """Anyone may publish on the shared requests topic: a request there for a team's data is REJECTED team-caller,
    naming the team's topic (or that it has none), unless ingest made it; the ledger is never touched."""
    teams = _teams()
    churn = parse_training_request(request(1))
    asked: list[str] = []

    def not_ingest(r: object) -> bool:
        asked.append("asked")
        return False

    charge, refused = team_of(churn, teams, topic="projects/p/topics/landfall-training-requests", ingested=not_ingest)
    assert charge is None and refused is not None and refused.code == "team-caller" and asked == ["asked"]
    assert "team 'churn' owns gs://landfall-landing/datasets/churn/" in refused.reason
    assert "landfall-requests-churn (`landfall submit --team churn`" in refused.reason
    raw = json.loads(request(3))
    raw["dataset"] = {"uri": "gs://landfall-landing/datasets/other/x/"}
    other = parse_training_request(json.dumps(raw).encode())
    refused = team_of(other, teams)[1]
    assert refused is not None and "the team has no requests topic of its own (`requests_topic`" in refused.reason
    # on the team's own topic, ingest is not asked
    assert team_of(churn, teams, topic="landfall-requests-churn", ingested=not_ingest)[0] is not None
    assert asked == ["asked"]

    w, ledger = world()
    w.dispatch_deps = replace(w.dispatch_deps, ingested=lambda r: False)
    assert w.deliver(request(1)) == "rejected:team-caller"
    run = w.run(run_id(1))
    assert run.state == RunState.REJECTED and run.error is not None and run.error.code == "team-caller"
    assert run.team is None and ledger.ledger("churn") is None and not w.vertex.jobs


def test_made_by_ingest_is_its_published_version_with_the_very_request() -> None:
    from functions.records.dataset_versions import made_by_ingest
    from schemas.dataset_record import VersionStatus
    from schemas.dataset_version import DatasetVersion

    req = parse_training_request(request(1))
    version = DatasetVersion(
        run_id=req.run_id,
        idempotency_key=req.idempotency_key,
        dataset_id="d",
        uri=f"gs://{req.dataset.bucket}/{req.dataset.prefix}",
        route="r",
        kind="gcs-marker",
        completed_by="gs://x/_SUCCESS",
        generation="1",
        status=VersionStatus.CLAIMED,
    )
    assert made_by_ingest(version, req) is None  # claimed: published, not yet recorded what (asked again)
    assert made_by_ingest(replace(version, status=VersionStatus.REFUSED), req) is False  # published nothing
    assert made_by_ingest(None, req) is False
    assert made_by_ingest(replace(version, uri="gs://landfall-landing/datasets/other/"), req) is False
    published = replace(version, status=VersionStatus.PUBLISHED, request=req.to_dict())
    assert made_by_ingest(published, req) is True
    bigger = json.loads(request(1))
    bigger["model"]["preset"] = "gpt-7b"
    assert not made_by_ingest(published, parse_training_request(json.dumps(bigger).encode()))


def test_waiting_team_runs_are_retried_by_priority_after_the_others() -> None:
    from functions.reconciler.team_looks import in_pass_order

    w, _ = world()
    assert w.deliver(request(1)) == "submitted"
    assert w.deliver(request(2), message_id="m-2") == "waiting:team-cap"
    runs = [w.run(run_id(2)), w.run(run_id(1))]
    looks = TeamLooks(priority=lambda n: 5, held_to_settle=list, settle=lambda r: False)
    assert [r.run_id for r in in_pass_order(runs, looks)] == [run_id(1), run_id(2)]


def test_a_settle_that_failed_is_done_by_the_reconciler_once() -> None:
    w, ledger = world()
    assert w.deliver(request(1)) == "submitted"
    runs = w.runs
    assert isinstance(runs, FakeSettlingRuns)
    runs.fail_settle = True
    name = w.job_name(run_id(1))
    w.vertex.set_state(name, "JOB_STATE_FAILED", start=w.clock.now, end=w.clock.now, error=(3, "bad"))
    w.clock.now += timedelta(minutes=5)
    assert w.job_event(name.rsplit("/", 1)[-1]).startswith("recorded:FAILED")
    assert ledger.ledger("churn") is not None and ledger.ledger("churn").gpus == {"NVIDIA_TESLA_T4": 2}  # type: ignore[union-attr]
    looks = TeamLooks(
        priority=lambda n: 0, held_to_settle=ledger.held_to_settle, settle=lambda r: ledger.settle(r, w.clock.now)
    )
    deps = replace(w.reconciler_deps(), teams=looks)
    assert "team-settled=1" in reconcile(deps)
    assert "team-settled" not in reconcile(deps)
    assert ledger.ledger("churn").gpus == {}  # type: ignore[union-attr]


def test_a_run_over_its_own_budget_while_running_is_cancelled_once_with_that_reason() -> None:
    w, _ = world()
    assert w.deliver(request(1, budget_usd=GPU_PLAN.hourly_cost_usd)) == "submitted"
    name = w.job_name(run_id(1))
    job_id = name.rsplit("/", 1)[-1]
    started = w.clock.now
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=started)
    assert w.job_event(job_id) == "recorded:RUNNING"
    deps = w.reconciler_deps()
    w.clock.now = started + timedelta(minutes=30)
    assert reconcile_run(w.run(run_id(1)), deps) != "budget-cancelled"  # half its budget so far
    w.clock.now = started + timedelta(minutes=61)
    assert reconcile_run(w.run(run_id(1)), deps) == "budget-cancelled"
    run = w.run(run_id(1))
    assert run.submission.cancel is not None and run.submission.cancel.by.startswith("budget-exceeded: ")
    first = run.submission.cancel
    assert reconcile_run(run, deps) != "budget-cancelled"  # asked once; the recorded request stands
    assert w.run(run_id(1)).submission.cancel == first
    w.vertex.set_state(name, "JOB_STATE_CANCELLED", end=w.clock.now, error=(1, "CANCELLED"))
    assert w.job_event(job_id) == "recorded:CANCELLED"
    ended = w.run(run_id(1))
    assert ended.state == RunState.CANCELLED and ended.error is not None and ended.error.code == "budget-exceeded"
    assert "passed its constraints.budget_usd" in ended.error.message
    assert ended.team is not None and not ended.team.held


def test_a_request_on_a_teams_topic_counts_for_it_and_data_outside_its_prefixes_is_rejected() -> None:
    from functions.dispatch.handler import handle_training_request
    from functions.envelopes import PubSubMessage

    w, _ = world()
    topic = "projects/landfall-local/topics/landfall-requests-churn"
    said = handle_training_request(PubSubMessage(data=request(1), message_id="m-1", topic=topic), w.dispatch_deps)
    assert said == "submitted"
    run = w.run(run_id(1))
    assert run.team is not None and (run.team.name, run.team.via) == ("churn", "topic")
    raw = json.loads(request(2))
    raw["dataset"] = {"uri": "gs://landfall-landing/datasets/other/x/"}
    outside = json.dumps(raw).encode()
    said = handle_training_request(PubSubMessage(data=outside, message_id="m-2", topic=topic), w.dispatch_deps)
    assert said == "rejected:team-prefix"
    rejected = w.run(parse_training_request(outside).run_id)
    assert rejected.state == RunState.REJECTED and rejected.error is not None and rejected.error.code == "team-prefix"
    assert "team 'churn''s topic landfall-requests-churn" in rejected.error.message


@pytest.mark.parametrize(
    ("timeout_s", "state", "code"), [(3600, "CANCELLED", "budget-exceeded"), (1800, "FAILED", "job-failed")]
)
def test_a_job_vertex_stopped_at_the_timeout_its_budget_set_is_cancelled_for_its_budget(
    timeout_s: int, state: str, code: str
) -> None:
    """The planner caps scheduling.timeout at what constraints.budget_usd pays: Vertex's timeout there is the budget
    running out (CANCELLED, budget-exceeded, as the reconciler's cancel); a timeout short of it is an ordinary one."""
    w, _ = world(plan=replace(GPU_PLAN, timeout_seconds=timeout_s))
    assert w.deliver(request(1, budget_usd=GPU_PLAN.hourly_cost_usd)) == "submitted"  # pays one hour
    name = w.job_name(run_id(1))
    timed_out = f"The job ran longer than its scheduling timeout of {timeout_s} seconds and was stopped."
    w.vertex.set_state(name, "JOB_STATE_FAILED", start=w.clock.now, end=w.clock.now, error=(4, timed_out))
    assert w.job_event(name.rsplit("/", 1)[-1]) == f"recorded:{state}"
    ended = w.run(run_id(1))
    assert ended.state == state and ended.error is not None and ended.error.code == code
    assert ended.error.reason == "timeout"
    if state == "CANCELLED":
        assert "stopped at its constraints.budget_usd" in ended.error.message and ended.error.job_message == timed_out
    assert ended.team is not None and not ended.team.held


# Every plan a run is submitted on is admitted against its team: fallbacks, re-plans, resubmissions ----------------

L4_PLAN = replace(
    PLAN,
    machine_type="g2-standard-4",
    accelerator_type="NVIDIA_L4",
    accelerator_count=1,
    replica_count=1,
    micro_batch_size=PLAN.global_batch_size // PLAN.gradient_accumulation_steps,
)


def _with_caps(w: World, caps: str) -> None:
    """The team churn's [teams.gpu_cap] table replaced by `caps` (the teams file as edited by an operator)."""
    text = TEAMS.replace("BUDGET", "100").replace("NVIDIA_TESLA_T4 = 3", caps)
    w.dispatch_deps = replace(w.dispatch_deps, teams=parse_teams(tomllib.loads(text)))


def _first_refused_for_capacity(w: World) -> None:
    import google.api_core.exceptions as gexc

    w.vertex.refuse(GPU_PLAN.region, gexc.ResourceExhausted("The following quota metrics exceed quota limits: T4"))


def test_a_fallback_on_a_gpu_kind_the_teams_cap_excludes_is_never_kept_nor_run() -> None:
    w, ledger = world()
    w.outcome = Outcome(GPU_PLAN, (L4_PLAN,))
    _with_caps(w, "NVIDIA_TESLA_T4 = 3\nNVIDIA_L4 = 0")
    _first_refused_for_capacity(w)
    assert w.deliver(request(1)) == "waiting:no-capacity"
    run = w.run(run_id(1))
    assert run.submission.fallbacks == () and run.state == RunState.WAITING and not w.vertex.jobs
    assert w.vertex.create_calls == [GPU_PLAN.region]
    stored = ledger.ledger("churn")
    assert stored is not None and stored.gpus == {} and run.team is not None and not run.team.held


def test_a_kept_fallback_the_team_no_longer_admits_is_recorded_not_admitted_and_not_run() -> None:
    """The fallback was allowed when the run was planned, and both plans were refused for capacity; the teams file
    then put the L4 cap at 0. The next round's fallback attempt says why, no job is created on it, and the run
    waits naming it."""
    w, ledger = world()
    w.outcome = Outcome(GPU_PLAN, (L4_PLAN,))
    _first_refused_for_capacity(w)
    _first_refused_for_capacity(w)  # the fallback too (the same region)
    assert w.deliver(request(1)) == "waiting:no-capacity"
    assert [p.machine_type for p in w.run(run_id(1)).submission.fallbacks or ()] == ["g2-standard-4"]

    _with_caps(w, "NVIDIA_TESLA_T4 = 3\nNVIDIA_L4 = 0")
    _first_refused_for_capacity(w)
    w.clock.now += timedelta(hours=1)
    deps = replace(w.reconciler_deps(), listener=replace(w.listener_deps), resubmit=_resubmit(w))
    assert reconcile_run(w.run(run_id(1)), deps) == "resubmitted:waiting:no-capacity"
    run = w.run(run_id(1))
    this_round = [a for a in run.submission.attempts or () if a.round == run.submission.round]
    outcomes = [a.outcome for a in this_round]
    assert outcomes[0].startswith("capacity: ") and outcomes[1].startswith("not admitted: team-limit: the run needs 1")
    assert "NVIDIA_L4" in outcomes[1] and not w.vertex.jobs and len(w.vertex.create_calls) == 3
    assert run.state == RunState.WAITING
    assert "1 x capacity: quota exhausted, 1 x not admitted: team-limit" in run.history[-1].detail
    stored = ledger.ledger("churn")
    assert stored is not None and stored.gpus == {}


def test_a_fallback_that_fits_moves_the_runs_hold_to_its_gpus_and_settles_once() -> None:
    w, ledger = world()
    w.outcome = Outcome(GPU_PLAN, (L4_PLAN,))
    _first_refused_for_capacity(w)
    assert w.deliver(request(1)) == "submitted"
    run = w.run(run_id(1))
    assert run.plan is not None and run.vertex is not None
    assert w.vertex.create_calls == [GPU_PLAN.region, L4_PLAN.region]
    assert run.team is not None and run.team.held and run.team.gpus == {"NVIDIA_L4": 1}
    assert run.team.reserved_usd == L4_PLAN.estimated_cost_usd
    stored = ledger.ledger("churn")
    assert stored is not None and stored.gpus == {"NVIDIA_L4": 1}
    month = stored.month(run.team.month)
    assert month.reserved_usd == L4_PLAN.estimated_cost_usd and month.runs == 1

    name = w.job_name(run_id(1))
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=w.clock.now, end=w.clock.now + timedelta(minutes=30))
    w.clock.now += timedelta(minutes=30)
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    after = ledger.ledger("churn")
    assert after is not None and after.gpus == {} and after.month(run.team.month).reserved_usd == 0.0


def test_a_fallback_past_a_cap_the_teams_other_runs_fill_is_skipped_for_the_next_allowed_plan() -> None:
    """The team's cap on L4 is 1 and another run holds it: the L4 fallback is not admitted (team-cap) and the run
    goes on to its next plan, a CPU machine."""
    w, ledger = world()
    _with_caps(w, "NVIDIA_TESLA_T4 = 3\nNVIDIA_L4 = 1")
    w.outcome = Outcome(L4_PLAN, ())
    assert w.deliver(request(1)) == "submitted"
    cpu = replace(PLAN, region="europe-west4")
    w.outcome = Outcome(GPU_PLAN, (L4_PLAN, cpu))
    _first_refused_for_capacity(w)
    assert w.deliver(request(2), message_id="m-2") == "submitted"
    run = w.run(run_id(2))
    outcomes = [a.outcome for a in run.submission.attempts or ()]
    assert outcomes[0].startswith("capacity: ") and outcomes[1].startswith("not admitted: team-cap: team 'churn' has 1")
    assert outcomes[2] == "created" and run.plan is not None and run.vertex is not None
    assert run.vertex.region == "europe-west4"
    stored = ledger.ledger("churn")
    assert stored is not None and stored.gpus == {"NVIDIA_L4": 1}
    assert run.team is not None and run.team.held and run.team.gpus == {}


# A team's month is held while its runs run ---------------------------------------------------------------------

ONE_T4 = gpu_plan(1)


def _running(w: World, n: int) -> str:
    """Deliver request n, and its job starts now; its job name."""
    assert w.deliver(request(n), message_id=f"m-{n}") == "submitted"
    name = w.job_name(run_id(n))
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=w.clock.now)
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:RUNNING"
    return name


def _looks(w: World, ledger: FakeLedger, budget: float) -> TeamLooks:
    def ledgers(names: object) -> dict[str, object]:
        found = {n: ledger.ledger(n) for n in ("churn", "other")}
        return {n: v for n, v in found.items() if v is not None}

    return TeamLooks(
        priority=lambda n: 5,
        held_to_settle=ledger.held_to_settle,
        settle=lambda r: ledger.settle(r, w.clock.now),
        budgets=lambda: {"churn": budget, "other": 1000.0},
        ledgers=ledgers,  # type: ignore[arg-type]
    )


def test_a_run_past_its_estimate_is_cancelled_when_its_teams_month_reaches_the_budget() -> None:
    """Two runs of team churn, each reserved at its estimate; the budget leaves room for a little more. While both
    run within their estimates nothing happens; once their cost past the estimates takes the month to the budget,
    the pass cancels both (each ran past its estimate), exactly once, and the listener records CANCELLED
    budget-exceeded; the month ends within one pass's interval of the team's price above its budget."""
    estimate = ONE_T4.estimated_cost_usd
    budget = 2 * estimate + ONE_T4.hourly_cost_usd * 0.25  # 15 min of one job's price past both estimates
    w, ledger = world(budget=budget, plan=ONE_T4)
    w.vertex.now = lambda: w.clock.now  # a cancelled job ends on the world's clock
    first, second = _running(w, 1), _running(w, 2)
    started = w.clock.now
    looks = _looks(w, ledger, budget)
    deps = replace(w.reconciler_deps(), teams=looks)
    estimated_hours = estimate / ONE_T4.hourly_cost_usd

    w.clock.now = started + timedelta(hours=estimated_hours) - timedelta(minutes=1)  # both within their estimates
    assert "budget-cancelled" not in reconcile(deps)
    w.clock.now = started + timedelta(hours=estimated_hours, minutes=5)  # 2 x 5 min past: under the 15 min left
    assert "budget-cancelled" not in reconcile(deps)
    w.clock.now = started + timedelta(hours=estimated_hours, minutes=8)  # 2 x 8 min past: over
    said = reconcile(deps)
    assert "budget-cancelled=2" in said, said
    assert sorted(w.vertex.cancelled) == sorted([first, second])
    run = w.run(run_id(1))
    assert run.submission.cancel is not None
    assert run.submission.cancel.by.startswith("budget-exceeded: team 'churn' reached its monthly budget")
    # asked once; the next pass finds both jobs cancelled and records them (their events lost)
    assert reconcile(deps) == "recorded:CANCELLED=2" and len(w.vertex.cancelled) == 2
    ended = w.run(run_id(2))
    assert ended.state == RunState.CANCELLED and ended.error is not None and ended.error.code == "budget-exceeded"
    after = ledger.ledger("churn")
    assert after is not None and after.gpus == {}
    spent = after.month(ended.team.month if ended.team else "").total_usd
    interval = timedelta(minutes=3) / timedelta(hours=1) * ONE_T4.hourly_cost_usd * 2  # the last pass's interval
    assert budget < spent <= budget + interval


def test_a_teams_runs_within_their_estimates_are_never_cancelled_for_its_month() -> None:
    """A month already near its budget from settled runs: runs admitted within it are not stopped while they are
    within their estimates, and a team without a budget entry is not looked at."""
    w, ledger = world(budget=ONE_T4.estimated_cost_usd * 1.01, plan=ONE_T4)
    _running(w, 1)
    deps = replace(w.reconciler_deps(), teams=_looks(w, ledger, ONE_T4.estimated_cost_usd * 1.01))
    w.clock.now += timedelta(hours=ONE_T4.estimated_cost_usd / ONE_T4.hourly_cost_usd * 0.99)
    assert "budget-cancelled" not in reconcile(deps) and not w.vertex.cancelled
    looks = deps.teams
    assert looks is not None
    no_budgets = replace(deps, teams=replace(looks, budgets=dict))
    w.clock.now += timedelta(hours=2)
    assert "budget-cancelled" not in reconcile(no_budgets) and not w.vertex.cancelled
    assert "budget-cancelled=1" in reconcile(deps)


def test_a_retry_of_a_teams_run_is_charged_to_it_only_when_the_old_run_names_it_and_it_is_its_retry() -> None:
    from functions.records.dataset_versions import retry_of_team_run
    from functions.records.retries import retry_request

    w, _ = world()
    assert w.deliver(request(1)) == "submitted"
    old = w.run(run_id(1))
    retry = retry_request(old, w.clock.now)
    assert not retry_of_team_run(old, retry)  # the old run does not name it (a publisher's own "retry")
    named = replace(old, retried_by=retry.run_id)
    assert retry_of_team_run(named, retry)
    assert retry_of_team_run(
        replace(old, retried_by=retry_request(old, w.clock.now, from_scratch=True).run_id),
        retry_request(old, w.clock.now, from_scratch=True),
    )
    assert not retry_of_team_run(replace(named, team=None), retry)
    # the same key and retry_of with someone else's code: not the team's retry
    forged = replace(retry, trainer=replace(retry.trainer, image_uri="us-docker.pkg.dev/x/y/z:1"))
    assert not retry_of_team_run(replace(old, retried_by=forged.run_id), forged)


# A team's jobs run as its own identity and write under its own folder ------------------------------------------


def test_a_teams_job_runs_as_its_own_identity_and_writes_under_its_folder() -> None:
    from deploy.teams import team_account_id
    from functions.settings import settings_from_env

    w, _ = world(plan=ONE_T4)
    settings = settings_from_env(
        {
            "GOOGLE_CLOUD_PROJECT": "landfall-local",
            "LANDFALL_CANARY_FIRST_RUNS": "0",
            "LANDFALL_TRAINING_SERVICE_ACCOUNT": "landfall-trainer@p.iam.gserviceaccount.com",
            "LANDFALL_TEAM_SERVICE_ACCOUNT": "{team}@p.iam.gserviceaccount.com",
        }
    )
    w.dispatch_deps = replace(w.dispatch_deps, settings=settings)
    assert w.deliver(request(1)) == "submitted"
    run = w.run(run_id(1))
    job = w.vertex.jobs[w.job_name(run_id(1))]
    assert job.job_spec.service_account == "lf-team-churn@p.iam.gserviceaccount.com"
    assert job.job_spec.base_output_directory.output_uri_prefix.endswith(f"/runs/churn/{run_id(1)}/")
    assert run.artifacts is not None and f"/runs/churn/{run_id(1)}/" in run.artifacts.model_dir
    # a run of no team: the shared trainer account and the shared folder
    assert settings.service_account_for("") == "landfall-trainer@p.iam.gserviceaccount.com"
    # account ids: at most 30 characters, and two long names never share one
    long_a, long_b = "a" * 30 + "-vision", "a" * 30 + "-speech"
    assert len(team_account_id(long_a)) <= 30 and team_account_id(long_a) != team_account_id(long_b)
    assert team_account_id("churn") == "lf-team-churn"
    with pytest.raises(Exception, match="must be an email with"):
        settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_TEAM_SERVICE_ACCOUNT": "team@p.iam"})


def test_a_teams_code_outside_its_folder_is_refused_before_planning_where_teams_have_identities() -> None:
    from functions.dispatch.code_versions import outside_team_folder
    from functions.settings import settings_from_env

    raw = json.loads(request(1))
    raw["trainer"] = {"script": "gs://landfall-code/scripts/abc/train.py"}
    raw["task"] = ""
    req = parse_training_request(json.dumps(raw).encode())
    said = outside_team_folder(req, "churn", "landfall-code")
    assert said is not None and "is outside the code folder of team 'churn' (gs://landfall-code/teams/churn/)" in said
    assert "`landfall submit --team churn`" in said
    raw["trainer"] = {"script": "gs://landfall-code/teams/churn/scripts/abc/train.py"}
    assert outside_team_folder(parse_training_request(json.dumps(raw).encode()), "churn", "landfall-code") is None

    w, ledger = world()
    settings = settings_from_env(
        {
            "GOOGLE_CLOUD_PROJECT": "landfall-local",
            "LANDFALL_CANARY_FIRST_RUNS": "0",
            "LANDFALL_CODE_BUCKET": "landfall-code",
            "LANDFALL_TEAM_SERVICE_ACCOUNT": "{team}@p.iam.gserviceaccount.com",
        }
    )
    w.dispatch_deps = replace(w.dispatch_deps, settings=settings)
    raw["trainer"] = {"script": "gs://landfall-code/scripts/abc/train.py"}
    assert w.deliver(json.dumps(raw).encode()) == "rejected:invalid-request"
    rejected = w.run(parse_training_request(json.dumps(raw).encode()).run_id)
    assert rejected.error is not None and "outside the code folder of team 'churn'" in rejected.error.message
    assert ledger.ledger("churn") is None and not w.vertex.jobs


def test_a_run_running_into_the_next_month_is_held_to_the_month_it_was_reserved_in() -> None:
    budget = ONE_T4.estimated_cost_usd + ONE_T4.hourly_cost_usd * 0.25
    w, ledger = world(budget=budget, plan=ONE_T4)
    w.vertex.now = lambda: w.clock.now
    _running(w, 1)
    month = w.run(run_id(1)).team.month  # type: ignore[union-attr]
    deps = replace(w.reconciler_deps(), teams=_looks(w, ledger, budget))
    w.clock.now += timedelta(days=40)  # the next month: its own spend is nothing, the run's month is over
    said = reconcile(deps)
    assert "budget-cancelled=1" in said, said
    cancel = w.run(run_id(1)).submission.cancel
    assert cancel is not None and f"for {month}" in cancel.by


def test_a_round_kept_back_only_by_the_teams_cap_or_budget_waits_for_the_team_not_for_capacity() -> None:
    from functions.dispatch.job_record import pending_attempt
    from functions.dispatch.team_rules import kept_back
    from schemas.run_record import AttemptKind, AttemptOutcome

    w, _ = world()
    assert w.deliver(request(1)) == "submitted"
    run = w.run(run_id(1))

    def attempt(kind: AttemptKind, detail: str) -> object:
        return pending_attempt(GPU_PLAN, "2026-11-22T12:00:00.000000Z", run).ended(AttemptOutcome(kind, detail))

    capped = attempt(AttemptKind.NOT_ADMITTED, "team-cap: team 'churn' has 3 of its 3 GPUs in flight")
    limit = attempt(AttemptKind.NOT_ADMITTED, "team-limit: the run needs 4 x NVIDIA_L4")
    refused = attempt(AttemptKind.CAPACITY, "quota exhausted")
    said = kept_back(run, [limit, capped])  # type: ignore[list-item]
    assert said is not None and said.verdict == "team-cap" and said.message.startswith("team 'churn' has 3")
    assert kept_back(run, [capped, refused]) is None  # type: ignore[list-item]  # Vertex refused one: capacity
    assert kept_back(run, [limit]) is None  # type: ignore[list-item]  # only hard limits: no room will come
