"""What past runs and canaries of a request's workload measured (schemas/measurement.py), as `landfall plan` reads
them to plan the way the dispatcher does."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from functions.operations import CapacityHistory
    from functions.settings import Settings
    from schemas.measurement import Measurement
    from schemas.training_request import TrainingRequest


def workload_measurements(request: TrainingRequest, settings: Settings) -> list[Measurement]:
    """The measurements of the request's workload in the settings' measurements collection (one equality query).
    Raises functions.errors.TransientError when Firestore does not answer."""
    from functions.operations import MeasurementsStore, firestore_client
    from schemas.measurement import workload_key

    store = MeasurementsStore(firestore_client(), settings.measurements_collection)
    return store.for_workload(workload_key(request))


def recent_capacity(settings: Settings) -> CapacityHistory:
    """What capacity the newest jobs met (schemas/capacity_event.py), as the planner's history: the dispatcher's
    read. Raises functions.errors.TransientError when Firestore does not answer."""
    from functions.operations import CapacityStore, capacity_history, firestore_client

    return capacity_history(CapacityStore(firestore_client(), settings.capacity_events_collection).newest())
