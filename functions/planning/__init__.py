"""The planner: the cheapest GPU (or CPU) configuration that fits and meets the deadline, explained.

outcome = plan_request(plan_input_from_request(training_request))
outcome.plan        # schemas.plan.Plan or None
outcome.fallbacks   # next-best Plans to try on quota errors or stockouts
outcome.rejection   # why nothing fits and what would make it fit (when plan is None)
outcome.candidates  # every configuration considered, with the reason it lost

plan_request(..., measured=[MeasuredFigures(...)])  # plan from what past runs and canaries measured
"""

from functions.planning.errors import CatalogError, PlanInputError
from functions.planning.inputs import PlanInput, parse_count, plan_input_from_request
from functions.planning.measured import MeasuredFigures
from functions.planning.planner import PlannerConfig, PlanOutcome, plan_request

__all__ = [
    "CatalogError",
    "MeasuredFigures",
    "PlanInput",
    "PlanInputError",
    "PlanOutcome",
    "PlannerConfig",
    "parse_count",
    "plan_input_from_request",
    "plan_request",
]
