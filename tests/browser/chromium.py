"""Headless Chromium from the distribution's packages (tests/browser/install.sh), driven over the Chrome DevTools
Protocol: open a page, and tell what a person would see (a screenshot), what the page holds (the DOM), what the
console said and what was fetched."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import websocket

START_TIMEOUT_S = 30
LOAD_TIMEOUT_S = 30
WIDTH, HEIGHT = 1280, 2400


def missing() -> str | None:
    """Why the browser cannot start here; None when it can."""
    if shutil.which("chromium") is None:
        return "no chromium: tests/browser/install.sh installs it from the distribution's packages (as root)"
    return None


@dataclass
class Visit:
    """What opening one page gave: its screenshot, the console's errors and every URL it fetched."""

    screenshot_png: bytes
    console_errors: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    values: dict = field(default_factory=dict)  # the expressions evaluated in the page, by name


class Chromium:
    """One headless browser for a test module; `visit` opens a page in it."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="tprimat-chromium-"))
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start; the page is our own file.
        self.process = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", f"--window-size={WIDTH},{HEIGHT}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = self._port()

    def _port(self) -> int:
        """The DevTools port Chromium chose, from the file it writes in its profile."""
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode} before it listened")
            if active.is_file() and active.read_text().strip():
                return int(active.read_text().split()[0])
            time.sleep(0.05)
        raise RuntimeError(f"chromium did not listen within {START_TIMEOUT_S} s")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def visit(self, page: Path, expressions: dict[str, str]) -> Visit:
        """Open page (a file) in the browser's tab, wait for its load, evaluate the named JavaScript expressions
        (JSON-serialisable values) and take a full-page screenshot."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as answer:
            tab = next(t for t in json.load(answer) if t["type"] == "page")
        socket = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=LOAD_TIMEOUT_S,
                                             suppress_origin=True)
        session = _Session(socket)
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                session.call(f"{domain}.enable")
            session.call("Emulation.setDeviceMetricsOverride",
                         {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
            session.call("Page.navigate", {"url": page.resolve().as_uri()})
            session.wait_for("Page.loadEventFired")
            values = {name: session.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                              "awaitPromise": True})["result"].get("value")
                      for name, expression in expressions.items()}
            shot = session.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
            return Visit(base64.b64decode(shot["data"]), session.errors, session.fetched, values)
        finally:
            socket.close()


class _Session:
    """Calls over one DevTools connection, keeping the events that tell of errors and fetches as they pass."""

    def __init__(self, socket) -> None:
        self.socket, self.next_id = socket, 0
        self.errors: list[str] = []
        self.fetched: list[str] = []
        self.seen: set[str] = set()

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self._event(message)

    def wait_for(self, event: str) -> None:
        while event not in self.seen:
            self._event(json.loads(self.socket.recv()))

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method is None:
            return
        self.seen.add(method)
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        elif method == "Network.requestWillBeSent":
            self.fetched.append(params["request"]["url"])
