"""The job table survives an emulator restart; jobs whose processes died with the emulator become FAILED."""

from __future__ import annotations

import signal

from google.cloud.aiplatform_v1 import JobState

from deploy.vertex_emulator.server import RESTART_MESSAGE

from .harness import PARENT, job_id, probe_job, probe_pool, process_alive, read_json


def _start_running_job(emulator, out):
    finished = emulator.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(out / "quick")]))
    assert emulator.wait_terminal(finished.name).state == JobState.JOB_STATE_SUCCEEDED
    running = emulator.client.create_custom_job(
        parent=PARENT, custom_job=probe_job([probe_pool(out / "long", "--sleep", "60", "--spawn-child")])
    )
    emulator.wait_state(running.name, JobState.JOB_STATE_RUNNING)
    record = read_json(out / "long" / "workerpool0-0.json")
    return finished, running, [record["pid"], record["child_pid"]]


def test_sigterm_stops_replicas_and_restart_marks_the_job_failed(start_emulator, events_topic, job_events, tmp_path):
    state = tmp_path / "state"
    first = start_emulator("--events-topic", events_topic[0], state_dir=state)
    finished, running, pids = _start_running_job(first, tmp_path)

    assert first.stop(signal.SIGTERM) == 0
    assert [pid for pid in pids if process_alive(pid)] == []

    second = start_emulator("--events-topic", events_topic[0], state_dir=state)
    assert second.client.get_custom_job(name=finished.name).state == JobState.JOB_STATE_SUCCEEDED
    failed = second.client.get_custom_job(name=running.name)
    assert failed.state == JobState.JOB_STATE_FAILED
    assert failed.error.message == RESTART_MESSAGE and failed.end_time
    assert {job.name for job in second.client.list_custom_jobs(parent=PARENT)} >= {finished.name, running.name}
    texts = [e["textPayload"] for e in job_events.wait_for_text(job_id(running), "Job failed.")]
    assert texts[-2:] == [RESTART_MESSAGE, "Job failed."]
    newer = second.client.create_custom_job(parent=PARENT, custom_job=probe_job([probe_pool(tmp_path / "new")]))
    assert int(job_id(newer)) > int(job_id(running)), "ids stay unique across restarts"


def test_killed_emulator_leaves_nothing_behind_after_restart(start_emulator, tmp_path):
    state = tmp_path / "state"
    first = start_emulator(state_dir=state)
    _, running, pids = _start_running_job(first, tmp_path)

    first.stop(signal.SIGKILL)
    assert all(process_alive(pid) for pid in pids), "replicas outlive a killed emulator"

    second = start_emulator(state_dir=state)
    assert [pid for pid in pids if process_alive(pid)] == []
    assert second.client.get_custom_job(name=running.name).state == JobState.JOB_STATE_FAILED
