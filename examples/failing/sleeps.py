"""Runs until it is stopped (the run is cancelled), touching a file so a test can see it started."""

import os
import time
from pathlib import Path

Path(os.environ["LANDFALL_MODEL_DIR"], f"started-{os.environ.get('RANK', '0')}").write_text("yes")
while True:
    time.sleep(0.2)
