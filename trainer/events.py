"""TensorBoard event files for AIP_TENSORBOARD_LOG_DIR (rank 0 only).

torch.utils.tensorboard writes to a local directory (it cannot write gs:// without TensorFlow); sync() copies the
event files to the log dir. Without the tensorboard package the run goes on and says so once.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from trainer import storage
from trainer.logs import log

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class EventLog:
    """Scalars for TensorBoard, or a no-op when there is no log dir (or no tensorboard package)."""

    def __init__(self, log_dir: str | None) -> None:
        self.log_dir = log_dir
        self._writer: SummaryWriter | None = None
        self._local = ""
        if not log_dir:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            log(
                "TensorBoard events are not written: the tensorboard package is missing",
                severity="WARNING",
                error=str(exc),
                fix="pip install tensorboard",
            )
            return
        self._local = log_dir if not storage.is_gcs(log_dir) else tempfile.mkdtemp(prefix="landfall-tb-")
        self._writer = SummaryWriter(log_dir=self._local)

    def scalar(self, tag: str, value: float, step: int) -> None:
        if self._writer is not None:
            self._writer.add_scalar(tag, value, step)

    def sync(self) -> None:
        """Flush and, for a gs:// log dir, upload the event files written so far."""
        if self._writer is None:
            return
        self._writer.flush()
        if self.log_dir and storage.is_gcs(self.log_dir):
            for root, _, files in os.walk(self._local):
                for name in files:
                    path = os.path.join(root, name)
                    storage.upload_file(path, storage.join(self.log_dir, os.path.relpath(path, self._local)))

    def close(self) -> None:
        if self._writer is not None:
            self.sync()
            self._writer.close()
            self._writer = None
