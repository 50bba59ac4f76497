"""A real headless Chromium (Debian's ``chromium``) driven through the DevTools protocol over
a pipe (``--remote-debugging-pipe``: no port, no extra package): open a page, hear every
console message, exception and network request it makes, evaluate JavaScript in it, and
take a screenshot."""

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def chromium_binary() -> str:
    """The browser's path; a clear failure when it is missing (the suite never skips)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(
        "Chromium is not installed: `apt-get install chromium` (.ci/run installs it)"
    )


@dataclass
class PageVisit:
    """What a page did while it loaded: console messages, uncaught exceptions, log entries
    and the URLs it requested."""

    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        """Every console error or warning, exception and log entry of level error."""
        found = [
            json.dumps(c.get("args"))
            for c in self.console
            if c.get("type") in ("error", "warning", "assert")
        ]
        found += [json.dumps(e.get("exceptionDetails", e)) for e in self.exceptions]
        found += [
            str(entry.get("entry", {}).get("text"))
            for entry in self.log
            if entry.get("entry", {}).get("level") in ("error", "warning")
        ]
        return found


class Browser:
    """One headless Chromium, one page."""

    def __init__(
        self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int, log: Path
    ):
        self.process = process
        self.log = log
        self._out = to_browser
        self._in = from_browser
        self._buffer = b""
        self._next = 0
        self._events: list[dict[str, Any]] = []
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30.0,
             session: bool = True) -> dict[str, Any]:  # fmt: skip
        """Call ``method`` and wait for its answer; events meanwhile are kept."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for answer in self._read(deadline):
                if answer.get("id") == self._next:
                    if "error" in answer:
                        raise AssertionError(f"{method} failed: {answer['error']}")
                    result: dict[str, Any] = answer.get("result", {})
                    return result
                self._events.append(answer)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first event ``method`` (kept or coming)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(index)
            self._events.extend(self._read(deadline))

    def events(self, method: str) -> list[dict[str, Any]]:
        """Every event ``method`` received so far (their parameters)."""
        self._events.extend(self._read(time.monotonic() + 0.2, wait=False))
        return [e.get("params", {}) for e in self._events if e.get("method") == method]

    def _read(self, deadline: float, *, wait: bool = True) -> list[dict[str, Any]]:
        messages = []
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                if wait:
                    raise AssertionError("Chromium did not answer in time")
                return messages
            ready, _, _ = select.select([self._in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                said = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"Chromium went away; it said:\n{said}")
            self._buffer += chunk
        *whole, self._buffer = self._buffer.split(b"\0")
        messages += [json.loads(part) for part in whole if part]
        return messages

    def visit(self, url: str, *, width: int = 1100, height: int = 900) -> PageVisit:
        """Open ``url`` in a fresh page and wait until it has loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
            session=False,
        )  # fmt: skip
        self.session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        time.sleep(0.3)  # a moment for anything the page would do after loading
        visit = PageVisit()
        visit.console = self.events("Runtime.consoleAPICalled")
        visit.exceptions = self.events("Runtime.exceptionThrown")
        visit.log = self.events("Log.entryAdded")
        visit.requests = [e["request"]["url"] for e in self.events("Network.requestWillBeSent")]
        return visit

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        answer = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in answer:
            raise AssertionError(f"the page's JavaScript failed: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self) -> bytes:
        """The whole page as a PNG."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                         "scale": 1},
            },
        )  # fmt: skip
        return base64.b64decode(shot["data"])


@contextlib.contextmanager
def headless_chromium() -> Iterator[Browser]:
    """A headless Chromium of its own (a fresh profile, no network service it starts by
    itself), closed at the end."""
    binary = chromium_binary()
    to_read, to_browser = os.pipe()  # the browser reads commands on its fd 3
    from_browser, to_write = os.pipe()  # and writes answers on its fd 4
    profile = tempfile.mkdtemp(prefix="ob-chromium-")
    log = Path(profile) / "chromium.log"
    flags = [
        "--headless=new",
        "--remote-debugging-pipe",
        "--no-sandbox",  # root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    process = subprocess.Popen(
        # bash: dash takes no descriptor above 9 in a redirection.
        ["bash", "-c", f'exec 3<&{to_read} 4>&{to_write}; exec "$0" "$@"', binary, *flags],
        pass_fds=(to_read, to_write),
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    os.close(to_read)
    os.close(to_write)
    browser = Browser(process, to_browser, from_browser, log)
    try:
        yield browser
    finally:
        with contextlib.suppress(OSError):
            os.close(to_browser)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        os.close(from_browser)
        shutil.rmtree(profile, ignore_errors=True)


def file_url(path: Path) -> str:
    """The ``file://`` URL of ``path``."""
    return path.resolve().as_uri()
