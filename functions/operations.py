"""What the CLI and the dashboard (landfall/) may use of the functions beyond their settings, errors, wiring and the
planner's package: the handlers' rules and adapters they share, each named here once, so that `landfall` imports no
handler's internals (the `landfall-public` import contract in pyproject.toml holds it to this module).

The CLI plans and prints a CustomJob as the dispatcher would (`landfall plan --custom-job`), refuses the requests the
dispatcher refuses, cancels and retries runs, retrains datasets and reads the planner's catalog and measurements, so
it needs the very functions the handlers use: this module is their one public name. Each is imported on first use
(PEP 562 `__getattr__`), so a command pays at start only for what it calls (`landfall runs` imports none of them).
A rule that changes in its own module is seen here unchanged; a name that moves is moved in PUBLIC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from functions.dispatch.dataset_check import DatasetObjects as DatasetObjects
    from functions.dispatch.dataset_check import check_dataset as check_dataset
    from functions.dispatch.dataset_check import listing_uris as listing_uris
    from functions.dispatch.job_spec import custom_job as custom_job
    from functions.dispatch.planner_config import planner_config as planner_config
    from functions.dispatch.request_rules import pinned_shape_problems as pinned_shape_problems
    from functions.dispatch.request_rules import trainer_problems as trainer_problems
    from functions.gcp.capacity_store import CapacityStore as CapacityStore
    from functions.gcp.clients import firestore_client as firestore_client
    from functions.gcp.clients import publisher_client as publisher_client
    from functions.gcp.clients import storage_client as storage_client
    from functions.gcp.measurements_store import MeasurementsStore as MeasurementsStore
    from functions.ingest.retrain import retrain as retrain
    from functions.planning.catalog import Catalog as Catalog
    from functions.planning.catalog import MachineShape as MachineShape
    from functions.planning.catalog import load_catalog as load_catalog
    from functions.planning.memory import breakdown as breakdown
    from functions.planning.risk import NO_HISTORY as NO_HISTORY
    from functions.planning.risk import CapacityHistory as CapacityHistory
    from functions.planning.workload import build_workload as build_workload
    from functions.reconciler.cancel import cancel_run as cancel_run
    from functions.records.capacity_events import capacity_history as capacity_history
    from functions.records.measurements import estimate_summary as estimate_summary
    from functions.records.measurements import planner_figures as planner_figures
    from functions.records.retries import RetryClaim as RetryClaim
    from functions.records.retries import claim_retry as claim_retry
    from functions.records.retries import not_retryable_reason as not_retryable_reason
    from functions.records.retries import retry_request as retry_request
    from functions.records.team_ledger import TeamUse as TeamUse

PUBLIC = {
    # the CustomJob the dispatcher submits for a plan, and the planner's settings it plans with
    "custom_job": "functions.dispatch.job_spec",
    "planner_config": "functions.dispatch.planner_config",
    # the dataset check the dispatcher makes before CreateCustomJob, which writes a team's code its dataset listing
    "DatasetObjects": "functions.dispatch.dataset_check",
    "check_dataset": "functions.dispatch.dataset_check",
    "listing_uris": "functions.dispatch.dataset_check",
    # the requests the dispatcher refuses before planning
    "pinned_shape_problems": "functions.dispatch.request_rules",
    "trainer_problems": "functions.dispatch.request_rules",
    # acting on runs and datasets: cancel, retry, retrain
    "cancel_run": "functions.reconciler.cancel",
    "RetryClaim": "functions.records.retries",
    "claim_retry": "functions.records.retries",
    "not_retryable_reason": "functions.records.retries",
    "retry_request": "functions.records.retries",
    "retrain": "functions.ingest.retrain",
    # a team's use against its limits (functions.wiring.team_usage returns them)
    "TeamUse": "functions.records.team_ledger",
    # the planner's catalog, memory model and workload, and what past runs measured
    "Catalog": "functions.planning.catalog",
    "MachineShape": "functions.planning.catalog",
    "load_catalog": "functions.planning.catalog",
    "breakdown": "functions.planning.memory",
    "build_workload": "functions.planning.workload",
    "MeasurementsStore": "functions.gcp.measurements_store",
    # what capacity recent jobs met (preemptions, refusals), as the planner prices it
    "CapacityStore": "functions.gcp.capacity_store",
    "capacity_history": "functions.records.capacity_events",
    "NO_HISTORY": "functions.planning.risk",
    "CapacityHistory": "functions.planning.risk",
    "planner_figures": "functions.records.measurements",
    "estimate_summary": "functions.records.measurements",
    # the clients the functions use: Firestore for landfall/queries.py (the read side), Cloud Storage for uploads
    # (`landfall drop`, `landfall submit --script`)
    "firestore_client": "functions.gcp.clients",
    # Pub/Sub publishes as this process's identity on the local stack (`landfall submit` as LANDFALL_IDENTITY)
    "publisher_client": "functions.gcp.clients",
    "storage_client": "functions.gcp.clients",
}
"""Each public name and the module that defines it."""


def __getattr__(name: str) -> Any:
    """The public name, read from its module when asked (never cached here, so a test's monkeypatch of the module
    is what the CLI calls)."""
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(
            f"functions.operations has no {name!r}; its public names are {', '.join(sorted(PUBLIC))} (add one "
            "to PUBLIC with the module that defines it)"
        )
    return getattr(importlib.import_module(module), name)


__all__ = sorted(PUBLIC)
