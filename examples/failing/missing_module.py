"""Imports a package its request did not list in trainer.requirements."""

import landfall_example_package_that_does_not_exist  # noqa: F401
