"""Imports a package its request did not list in trainer.requirements."""

import importlib

importlib.import_module("landfall_example_package_that_does_not_exist")
