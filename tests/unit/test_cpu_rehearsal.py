"""The CPU rehearsal switch's wiring: what a team's processes get, and that the Vertex emulator passes the switch."""

from __future__ import annotations

from deploy.vertex_emulator.host_env import host_environment
from trainer.cpu_rehearsal import REHEARSAL_ENV, SITE_FOLDER, rehearsal_env


def test_the_switch_puts_the_rehearsal_folder_first_on_the_python_path_and_only_when_on() -> None:
    assert rehearsal_env({}) == {}
    assert rehearsal_env({REHEARSAL_ENV: "0", "PYTHONPATH": "/app"}) == {}
    assert rehearsal_env({REHEARSAL_ENV: "1"}) == {"PYTHONPATH": str(SITE_FOLDER)}
    assert rehearsal_env({REHEARSAL_ENV: "1", "PYTHONPATH": "/app:/lib"}) == {"PYTHONPATH": f"{SITE_FOLDER}:/app:/lib"}
    assert (SITE_FOLDER / "sitecustomize.py").is_file()


def test_the_vertex_emulator_passes_the_switch_to_replicas_and_not_landfall_s_other_settings() -> None:
    passed = host_environment({REHEARSAL_ENV: "1", "LANDFALL_TEAMS_FILE": "t.toml"})
    assert passed == {REHEARSAL_ENV: "1"}
