"""The launcher's stand-in for the checkpoint folder where no FUSE mount is: AIP_CHECKPOINT_DIR copied down before
the code starts, and only what the code added or changed copied back when it ends."""

from __future__ import annotations

import os
from pathlib import Path

from trainer.checkpoint_folder import CheckpointFolder, save_checkpoints, stage_checkpoints


def test_a_resumed_attempt_finds_what_the_last_one_saved_and_only_its_own_writes_go_back(tmp_path: Path) -> None:
    remote = tmp_path / "bucket" / "checkpoints"
    (remote / "step-10").mkdir(parents=True)
    (remote / "step-10" / "model.pt").write_bytes(b"weights at 10")
    (remote / "latest").write_text("step-10")
    folder = stage_checkpoints({"AIP_CHECKPOINT_DIR": f"{remote}/"}, tmp_path / "node", mount=str(tmp_path / "none"))
    local = Path(folder.path)
    assert local.parent == tmp_path / "node" and local != remote
    assert (local / "step-10" / "model.pt").read_bytes() == b"weights at 10"
    assert set(folder.restored) == {"step-10/model.pt", "latest"}

    before = (remote / "step-10" / "model.pt").stat().st_mtime_ns
    (local / "step-20").mkdir()
    (local / "step-20" / "model.pt").write_bytes(b"weights at 20")
    (local / "latest").write_text("step-20")
    written = save_checkpoints(folder)
    assert sorted(written) == sorted([f"{remote}/latest", f"{remote}/step-20/model.pt"])
    assert (remote / "latest").read_text() == "step-20"
    assert (remote / "step-20" / "model.pt").read_bytes() == b"weights at 20"
    assert (remote / "step-10" / "model.pt").stat().st_mtime_ns == before  # unchanged: not put back


def test_an_older_copy_on_another_node_does_not_overwrite_a_newer_save(tmp_path: Path) -> None:
    remote = tmp_path / "ckpt"
    remote.mkdir()
    (remote / "latest").write_text("step-10")
    mount = str(tmp_path / "none")
    node0 = stage_checkpoints({"AIP_CHECKPOINT_DIR": str(remote)}, tmp_path / "n0", mount)
    node1 = stage_checkpoints({"AIP_CHECKPOINT_DIR": str(remote)}, tmp_path / "n1", mount)
    Path(node0.path, "latest").write_text("step-20")
    save_checkpoints(node0)
    assert save_checkpoints(node1) == []
    assert (remote / "latest").read_text() == "step-20"


def test_with_the_mount_the_folder_is_the_fuse_path_and_nothing_is_copied(tmp_path: Path) -> None:
    mount = tmp_path / "gcs"
    mount.mkdir()
    folder = stage_checkpoints({"AIP_CHECKPOINT_DIR": "gs://b/runs/r/checkpoints/"}, tmp_path / "node", str(mount))
    assert folder == CheckpointFolder(f"{mount}/b/runs/r/checkpoints/")
    assert save_checkpoints(folder) == []


def test_without_aip_checkpoint_dir_the_code_still_gets_an_empty_folder(tmp_path: Path) -> None:
    folder = stage_checkpoints({}, tmp_path / "node", str(tmp_path / "none"))
    assert os.path.isdir(folder.path) and os.listdir(folder.path) == []
    Path(folder.path, "x").write_text("kept locally")
    assert save_checkpoints(folder) == []


def test_the_newest_committed_checkpoint_is_the_step_to_resume_from(tmp_path: Path) -> None:
    from trainer.checkpoint_folder import RESUME_STEP_ENV, newest_committed_step, resume_env

    remote = tmp_path / "ckpt"
    for step, committed in ((20, True), (40, True), (60, False)):  # 60: its writer was stopped before the commit
        folder = remote / f"step-{step:09d}"
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"shard")
        if committed:
            (folder / "commit.json").write_text("{}")
    (remote / "step-80").mkdir()  # not the layout (nine digits): not a checkpoint Landfall reads
    (remote / "step-80" / "commit.json").write_text("{}")
    (remote / "step-000000100.tmp").mkdir()
    (remote / "step-000000100.tmp" / "commit.json").write_text("{}")
    staged = stage_checkpoints({"AIP_CHECKPOINT_DIR": str(remote)}, tmp_path / "node", str(tmp_path / "none"))
    assert newest_committed_step(staged) == 40
    assert resume_env(staged) == {RESUME_STEP_ENV: "40"}
    empty = stage_checkpoints({}, tmp_path / "fresh", str(tmp_path / "none"))
    assert newest_committed_step(empty) is None and resume_env(empty) == {}
