"""The dashboard in a real browser for the tests: Debian's Chromium (/usr/bin/chromium, `.ci/run` installs the
`chromium` package) driven by Playwright for Python, which is given that executable and downloads no browser of its
own; the dashboard served by uvicorn in a thread; every console error and uncaught page error kept; screenshots
saved under SCREENSHOTS for a reviewer."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deploy.local import processes
from tests.polling import wait_for

CHROMIUM = os.environ.get("LANDFALL_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / ".landfall" / "ui-screenshots"
"""Where the browser tests save the pages they looked at (one PNG per page, overwritten by the next run)."""


def chromium_or_skip() -> str:
    """The Chromium executable; without one the test cannot run here, and says how to install it."""
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
        pytest.skip(f"no Chromium at {CHROMIUM}: `apt-get install -y chromium` (what .ci/run does)")
    return CHROMIUM


@dataclass
class Console:
    """The console errors and uncaught exceptions of every page opened."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> Any:
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        return page


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium of the operating system's, through Playwright."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def served(app: Any) -> Iterator[str]:
    """The ASGI app on a free port of 127.0.0.1, in a thread; yields its base URL."""
    import uvicorn

    port = processes.free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the dashboard to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
