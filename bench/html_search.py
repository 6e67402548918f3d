"""How responsive the html page's search is on 3,000 cards, in headless Chromium; and how
soon a page is interactive after it starts to load.

    python3 bench/html_search.py                 # needs chromium and chromedriver on PATH
    python3 bench/html_search.py --open 300 3000 20000  # how soon search and keys work, at these turns

The session (1,500 turns: a model call and a tool call each, 3,000 cards) is made at run
time under a temporary folder.  Chromium is driven through chromedriver's WebDriver protocol
(plain HTTP): the baseline is one load of the page; the figure is the time from the first of
ten keystrokes typed into the search to the page showing the count of their matches (the
search waits for a pause of 120 ms in typing, then filters), as a ratio of the page load,
medians of interleaved repetitions.

With ``--open``, the session is ``html_page.py``'s (each request carries the whole context)
at each number of turns, and the page is opened without waiting for it to load: the figures
are the times from the navigation's start (``performance.now()`` in the page) until a word
typed into the search as soon as the box shows (``/`` and the word, as key presses) has its
first match shown in the conversation, until ``j`` (pressed until it does) has focused the
conversation's first call, and until the whole page is parsed (``DOMContentLoaded``):
medians of three loads each.
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

assert sys.platform != "win32", "--open builds its sessions with html_page.py, on Unix only"

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
    """Headless Chromium under chromedriver; with *wait* False, a navigation returns at once."""

    def __init__(self, profile: Path, wait: bool = True) -> None:
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
        if not wait:
            capabilities["alwaysMatch"]["pageLoadStrategy"] = "none"
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


FIRST_MATCH = """
var word = arguments[0], count = document.getElementById("matches");
if (!count || !/^[1-9][0-9,]* match/.test(count.textContent)) return null;
var steps = document.querySelectorAll("#conversation .step:not(.miss)");
for (var i = 0; i < steps.length; i++) if (steps[i].textContent.indexOf(word) >= 0) return performance.now();
return null;
"""


def press(browser: Browser, keys: str) -> None:
    presses = [{"type": kind, "value": key} for key in keys for kind in ("keyDown", "keyUp")]
    browser.page("POST", "/actions", {"actions": [{"type": "key", "id": "k", "actions": presses}]})


def opened(browser: Browser, url: str, what: str) -> float:
    """Milliseconds from the start of loading *url* until *what* works: "search" or "keys"."""
    browser.page("POST", "/url", {"url": "about:blank"})
    browser.page("POST", "/url", {"url": url})
    box = "var b = document.getElementById('search');"
    box += " return location.href === arguments[0] && !!b && !!b.offsetParent"
    while not browser.page("POST", "/execute/sync", {"script": box, "args": [url]}):
        pass
    if what == "keys":
        focused = "return document.activeElement.matches('#conversation .step') ? performance.now() : null"
        while True:
            press(browser, "j")
            at = browser.run(focused)
            if at is not None:
                return float(at)
    press(browser, "/quartz")  # as a person types (WebDriver's element typing waits for the load)
    while True:
        at = browser.page("POST", "/execute/sync", {"script": FIRST_MATCH, "args": ["quartz"]})
        if at is not None:
            return float(at)


def parsed(browser: Browser) -> float:
    """Milliseconds from the navigation's start to the end of DOMContentLoaded, once it came."""
    script = "var n = performance.getEntriesByType('navigation')[0]; return n && n.domContentLoadedEventEnd"
    while not browser.run(script):
        time.sleep(0.1)
    return float(browser.run(script))


def open_times(counts: List[int]) -> None:
    import html_page

    print("turns | page | nodes | first match of a search | j | DOMContentLoaded")
    for turns in counts:
        with tempfile.TemporaryDirectory() as folder:
            path, page = Path(folder) / "s.jsonl", Path(folder) / "s.html"
            html_page.build(path, 0, 2, turns)
            command = [sys.executable, "-m", "session", "html", str(path), "-o", str(page)]
            subprocess.run(command, cwd=ROOT, check=True)
            browser = Browser(Path(folder) / "profile", wait=False)
            try:
                search, keys, loaded = [], [], []
                for _ in range(3):
                    search.append(opened(browser, page.as_uri(), "search"))
                    loaded.append(parsed(browser))
                    keys.append(opened(browser, page.as_uri(), "keys"))
                parsed(browser)  # the last load's page whole
                nodes = browser.run("return document.getElementsByTagName('*').length")
            finally:
                browser.close()
            size = page.stat().st_size / 1e6
            times = [statistics.median(figures) / 1000 for figures in (search, keys, loaded)]
            figures = " | ".join(f"{t:.2f} s" for t in times)
            print(f"{turns:,} | {size:.1f} MB | {nodes:,} | {figures}")


def main() -> int:
    if sys.argv[1:2] == ["--open"]:
        open_times([int(count) for count in sys.argv[2:]])
        return 0
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
