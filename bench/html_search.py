"""How responsive the html page's search is on 3,000 cards, in headless Chromium.

    python3 bench/html_search.py        # needs chromium and chromedriver on PATH

The session (1,500 turns: a model call and a tool call each, 3,000 cards) is made at run
time under a temporary folder.  Chromium is driven through chromedriver's WebDriver protocol
(plain HTTP): the baseline is one load of the page; the figure is the time from the first of
ten keystrokes typed into the search to the page showing the count of their matches (the
search waits for a pause of 120 ms in typing, then filters), as a ratio of the page load,
medians of interleaved repetitions.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import session  # noqa: E402

T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=dt.timezone.utc)
TEXT = "The quick brown fox jumps over the lazy dog; sphinx of black quartz, judge my vow. "


def build(path: Path, turns: int) -> None:
    """*turns* turns of a model call (the context so far) and a tool call."""
    messages: List[session.Message] = []
    with session.create(path) as s, s.begin_run() as run:
        for turn in range(1, turns + 1):
            moment = T0 + dt.timedelta(seconds=turn)
            run.record(session.Event("turn_start", turn_index=turn, timestamp=moment))
            messages.append(
                session.Message("user", [session.text_block(f"{turn}: {TEXT}")], timestamp=moment)
            )
            model = session.Execution(f"model-{turn}", "model", turn_index=turn)
            request = session.ModelRequest(list(messages))
            run.record(session.Event("model_request", execution=model, request=request, timestamp=moment))
            reply = session.Message("assistant", [session.text_block(f"reply {turn}: {TEXT}")], "stop")
            run.record(session.Event("model_exec_end", execution=model, message=reply, timestamp=moment))
            tool = session.Execution(f"call-{turn}", "tool", turn_index=turn)
            result = f"result {turn}: {TEXT}"
            run.record(
                session.Event("tool_exec_end", execution=tool, tool="grep", result=result, timestamp=moment)
            )
            messages.append(reply)


class Browser:
    """Headless Chromium under chromedriver."""

    def __init__(self, profile: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.driver = subprocess.Popen(
            ["chromedriver", f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(100):
            try:
                if self.call("GET", "/status")["ready"]:
                    break
            except OSError:
                time.sleep(0.1)
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
        ]
        options = {"binary": shutil.which("chromium"), "args": flags}
        capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        self.id = self.call("POST", "/session", {"capabilities": capabilities})["sessionId"]

    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request(method, path, json.dumps(body) if body is not None else None)
            return json.loads(connection.getresponse().read())["value"]
        finally:
            connection.close()

    def page(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        return self.call(method, f"/session/{self.id}{path}", body)

    def run(self, script: str) -> Any:
        return self.page("POST", "/execute/sync", {"script": script, "args": []})

    def close(self) -> None:
        self.call("DELETE", f"/session/{self.id}")
        self.driver.terminate()
        self.driver.wait(timeout=30)


def load(browser: Browser, url: str) -> float:
    start = time.perf_counter()
    browser.page("POST", "/url", {"url": url})  # returns once the page has loaded
    return time.perf_counter() - start


def search(browser: Browser, text: str, expected: str) -> float:
    """Seconds from the first keystroke of *text* to the count *expected* on the page."""
    box = browser.page("POST", "/element", {"using": "css selector", "value": "#search"})
    element = next(iter(box.values()))
    start = time.perf_counter()
    browser.page("POST", f"/element/{element}/value", {"text": text})
    while browser.run("return document.getElementById('matches').textContent") != expected:
        pass
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        path, page = Path(folder) / "s.jsonl", Path(folder) / "s.html"
        build(path, 1500)
        subprocess.run(
            [sys.executable, "-m", "session", "html", str(path), "-o", str(page)], cwd=ROOT, check=True
        )
        browser = Browser(Path(folder) / "profile")
        try:
            loads, searches = [], []
            for _ in range(5):  # interleaved: both see the same machine load
                loads.append(load(browser, page.as_uri()))
                cards = browser.run("return document.querySelectorAll('.card').length")
                searches.append(search(browser, "result 123", "11 matches"))  # 123, 1230 to 1239
        finally:
            browser.close()
        base, typed = statistics.median(loads), statistics.median(searches)
        print(f"page: {page.stat().st_size / 1e6:.1f} MB, {cards} cards")
        print(f"page load: {base:.3f} s   10 keystrokes to their matches: {typed:.3f} s")
        print(f"keystrokes / page load: {typed / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
