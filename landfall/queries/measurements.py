"""What past runs and canaries of a request's workload measured (schemas/measurement.py), as `landfall plan` reads
them to plan the way the dispatcher does."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
