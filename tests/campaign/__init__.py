"""The fault campaign (`make campaign`): the real local stack, faults drawn from a seed, invariants checked after
every trial. `python -m tests.campaign --help`."""
