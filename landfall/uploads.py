"""Where landfall writes objects to Cloud Storage: the folders `landfall drop` lands, the code `landfall submit
--script/--package` uploads and the demo's dataset. The one module of landfall/ beside the read side
(landfall/queries/) that holds a Storage client (a unit test keeps it so)."""

from __future__ import annotations

from typing import Any


def bucket(name: str) -> Any:
    """The bucket through the client the functions use (functions.operations.storage_client: the emulator's on the
    local stack, Google Cloud's otherwise)."""
    from functions.operations import storage_client

    return storage_client().bucket(name)


def local_bucket(name: str) -> Any:
    """The bucket on the local stack's Storage emulator, with anonymous credentials (`landfall demo`)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from functions.settings import get_settings

    client = storage.Client(project=get_settings().project, credentials=AnonymousCredentials())
    return client.bucket(name)
