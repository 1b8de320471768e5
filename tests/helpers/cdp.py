"""Headless Chromium driven over the DevTools protocol (a websocket, ``websocket-client``), for the
browser tests of the reports: load a file, collect console errors, exceptions and CSP
violations, evaluate JavaScript, take screenshots. One browser serves a whole test session."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")

# Runs before any page script (DevTools scripts are not subject to the page's CSP): records
# CSP violations so a test can read them back.
_WATCH = ("window.__csp=[];document.addEventListener('securitypolicyviolation',"
          "function(e){window.__csp.push(e.violatedDirective+' '+e.blockedURI);});")


def find_chromium() -> str | None:
    """The Chromium executable (``CTXLEAK_CHROMIUM`` or the first on PATH), or None."""
    env = os.environ.get("CTXLEAK_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process and one page (tab) in it."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900) -> None:
        import websocket

        self.profile = tempfile.mkdtemp(prefix="ctxleak-chromium-")
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
             "--disable-background-networking", "--disable-sync", "--mute-audio",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._port(timeout=30.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.loads(resp.read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Page.addScriptToEvaluateOnNewDocument", source=_WATCH)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _port(self, timeout: float) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.is_file():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; events that arrive meanwhile are kept in ``events``."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def _wait(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, msg in enumerate(self.events):
                if msg["method"] == event:
                    return self.events.pop(i)
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(event)

    def open(self, path: str | Path) -> None:
        """Load a local file and wait for its load event (console events start afresh)."""
        self.events.clear()
        self.send("Page.navigate", url=Path(path).resolve().as_uri())
        self._wait("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        out = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"evaluate failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the centre of the first element matching
        ``selector``, scrolled into view first."""
        box = self.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
          e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
          return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and CSP violations since the page was opened."""
        self.send("Runtime.evaluate", expression="0")  # flush pending events
        found = []
        for msg in self.events:
            p = msg.get("params", {})
            if msg["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error",
                                                                                  "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                    for a in p.get("args", [])))
            elif msg["method"] == "Runtime.exceptionThrown":
                found.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
            elif msg["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                found.append("log: " + p["entry"].get("text", ""))
        found += [f"csp: {v}" for v in self.evaluate("window.__csp || []")]
        return found

    def screenshot(self, target: str | Path, full_page: bool = False) -> Path:
        """A PNG of the viewport (or of the whole page) written to ``target``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"],
                                "height": min(size["height"], 6000), "scale": 1})
        data = base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])
        out = Path(target)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        return out

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
