"""Checkpoint store on fake-gcs-server: the same contract as on a local directory (tests/checkpoint_contract.py)."""

from __future__ import annotations

import uuid

from tests.checkpoint_contract import exercise_checkpoint_store


def test_gcs(gcs_emulator) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    bucket = gcs.Client(project="landfall-local", credentials=AnonymousCredentials()).create_bucket(
        f"ckpt-{uuid.uuid4().hex[:10]}"
    )
    exercise_checkpoint_store(f"gs://{bucket.name}/run/checkpoints/", lambda: [b.name for b in bucket.list_blobs()])
