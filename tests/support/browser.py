"""Debian's Chromium driven headless by Playwright (which never downloads a browser of its own here),
and a real `mqlab serve` process for a page to load."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path(os.environ.get("MQLAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_MISSING = (f"no Chromium at {CHROMIUM}: `scripts/bootstrap.sh` installs it as root; otherwise "
                    "`apt-get install -y chromium` (or point MQLAB_CHROMIUM at a Chromium binary)")
# headless, and nothing that reaches for the network at start: this machine's network is closed
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")
SERVE_START_BUDGET_S = 30.0
SERVE_STOP_BUDGET_S = 10.0
_URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/)")


@contextlib.contextmanager
def chromium_page(width: int = 1280, height: int = 900) -> Iterator[object]:
    """A fresh headless Chromium page (a Playwright `Page`); console errors fail nothing by themselves."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_FLAGS), headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


class ServeProcess:
    """`mqlab serve ARGS --port 0` as its own process; `url()` waits for the URL it prints."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", *args, "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "COLUMNS": "400"})
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._url: str | None = None
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def url(self) -> str:
        while self._url is None:
            try:
                line = self._lines.get(timeout=SERVE_START_BUDGET_S)
            except queue.Empty:
                raise AssertionError(f"mqlab serve printed no URL in {SERVE_START_BUDGET_S} s: "
                                     f"{''.join(self.output)}") from None
            if line is None:
                raise AssertionError(f"mqlab serve exited {self.proc.wait()} before serving: {''.join(self.output)}")
            found = _URL_RE.search(line)
            self._url = found.group(1) if found else None
        return self._url

    def stop(self) -> None:
        """SIGTERM (as Ctrl-C); it must exit within SERVE_STOP_BUDGET_S."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=SERVE_STOP_BUDGET_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"mqlab serve did not stop on SIGTERM: {''.join(self.output)}") from None


@contextlib.contextmanager
def serve_process(*args: str) -> Iterator[ServeProcess]:
    """A started `ServeProcess`, stopped at the end (its start overlaps whatever the caller does next)."""
    served = ServeProcess(*args)
    try:
        yield served
    finally:
        served.stop()
