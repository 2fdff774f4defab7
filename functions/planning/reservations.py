"""Compute Engine reservations a plan may run on: what each holds, and how a job names it.

A reservation is declared in the settings (LANDFALL_RESERVATIONS, a JSON object of name -> machine type, zone,
count) since the planner reads no Google API; a request may name one of them (`constraints.reservation`) to run on
it. A job consumes it through its pools' `machineSpec.reservationAffinity` (SPECIFIC_RESERVATION, key
`compute.googleapis.com/reservation-name`, values: the reservation's full resource name). Google bills a reservation
whether or not a VM consumes it, so the planner counts reserved machines as already paid for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from functions.planning.catalog import Catalog, MachineShape
from functions.planning.errors import PlanInputError

EXAMPLE = '{"my-h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}'


@dataclass(frozen=True)
class Reservation:
    name: str
    machine_type: str
    zone: str
    count: int
    """Machines it holds."""
    project: str = ""
    """The project that owns it (a shared reservation); "" = the job's own project."""
    accelerator_type: str = ""
    """N1 reservations only: the GPU kind the VMs carry (fixed shapes imply it)."""
    accelerator_count: int = 0

    @property
    def region(self) -> str:
        """us-central1-a -> us-central1."""
        return self.zone.rsplit("-", 1)[0]

    def resource_name(self, project: str) -> str:
        """projects/P/zones/Z/reservations/NAME, the value reservationAffinity takes; ValueError without a project."""
        owner = self.project or project
        if not owner:
            raise ValueError(f"reservation {self.name}: no project to name it in (set its project, or the planner's)")
        return f"projects/{owner}/zones/{self.zone}/reservations/{self.name}"

    def matches(self, shape: MachineShape) -> bool:
        return (
            shape.machine_type == self.machine_type
            and (not self.accelerator_type or shape.accelerator_type == self.accelerator_type)
            and (not self.accelerator_count or shape.accelerator_count == self.accelerator_count)
        )

    def describe(self) -> str:
        gpus = f" with {self.accelerator_count}x {self.accelerator_type}" if self.accelerator_type else ""
        return f"{self.name} ({self.count} x {self.machine_type}{gpus} in {self.zone})"


def parse_reservations(text: str) -> tuple[Reservation, ...]:
    """LANDFALL_RESERVATIONS' JSON into reservations; PlanInputError naming the entry and what was expected."""
    if not text.strip():
        return ()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanInputError(f"LANDFALL_RESERVATIONS is not JSON ({exc}); expected e.g. {EXAMPLE}") from exc
    if not isinstance(data, dict):
        raise PlanInputError(f"LANDFALL_RESERVATIONS must be a JSON object of name -> reservation, e.g. {EXAMPLE}")
    out = []
    for name, spec in data.items():
        where = f"LANDFALL_RESERVATIONS.{name}"
        if not isinstance(spec, dict):
            raise PlanInputError(f"{where}: expected an object with machine_type, zone and count, e.g. {EXAMPLE}")
        unknown = set(spec) - {"machine_type", "zone", "count", "project", "accelerator_type", "accelerator_count"}
        if unknown:
            raise PlanInputError(
                f"{where}: unknown fields {sorted(unknown)}; expected machine_type, zone, count and optionally "
                "project, accelerator_type, accelerator_count"
            )
        machine, zone, count = spec.get("machine_type"), spec.get("zone"), spec.get("count")
        if not isinstance(machine, str) or not machine:
            raise PlanInputError(f"{where}.machine_type: expected a machine type such as a3-highgpu-8g")
        if not isinstance(zone, str) or zone.count("-") < 2:
            raise PlanInputError(f"{where}.zone: expected a zone such as us-central1-a, got {zone!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PlanInputError(f"{where}.count: expected the number of machines it holds (>= 1), got {count!r}")
        accelerator_count = spec.get("accelerator_count", 0)
        if not isinstance(accelerator_count, int) or accelerator_count < 0:
            raise PlanInputError(f"{where}.accelerator_count: expected an integer >= 0")
        out.append(
            Reservation(
                name=name,
                machine_type=machine,
                zone=zone,
                count=count,
                project=str(spec.get("project", "")),
                accelerator_type=str(spec.get("accelerator_type", "")),
                accelerator_count=accelerator_count,
            )
        )
    return tuple(out)


def reservation_problems(reservation: Reservation, catalog: Catalog) -> list[str]:
    """Why a reservation cannot carry any plan of this catalog ([] when it can)."""
    shapes = [s for s in catalog.shapes if reservation.matches(s)]
    if not shapes:
        return [
            f"reservation {reservation.describe()}: no machine shape of the catalog is {reservation.machine_type}"
            + (
                f" with {reservation.accelerator_count}x {reservation.accelerator_type}"
                if reservation.accelerator_type
                else ""
            )
        ]
    problems = []
    if reservation.region not in shapes[0].regions:
        problems.append(
            f"reservation {reservation.describe()}: Vertex offers {reservation.machine_type} in "
            f"{', '.join(shapes[0].regions)}, not {reservation.region}"
        )
    rule = catalog.consumption.rule(reservation.machine_type)
    if not rule.sold("reservation", reservation.region):
        problems.append(
            f"reservation {reservation.describe()}: Google does not sell {reservation.machine_type} through "
            f"reservations ({rule.describe()}; {rule.sources[0]})"
        )
    return problems
