#!/usr/bin/env python3
"""How soon each page of the web console paints and shows its data, in a real headless Chromium
(Debian's chromium and chromium-driver) driven over WebDriver with the standard library only.

    scripts/console-paint.py CONSOLE_BASE KEYS_PREFIX HISTORY_KEY [ROUNDS]

CONSOLE_BASE is a member's client URL (http://127.0.0.1:7001), KEYS_PREFIX a prefix whose tree page
is measured (with many keys under it), HISTORY_KEY a key with versions. For each page it prints the
browser's first contentful paint and the time, from navigation start, by which the page's data was
on screen (an upper bound when it was there at the first look). docs/BENCHMARKS.md has a run with
100,000 keys. A benchmark, not a test: the suite does not run it.
"""

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
# Chromium's flags: headless, and none of its own network traffic.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1300,900"]

# Resolves once `selector` matches, with the time since navigation start.
WAIT_FOR_SELECTOR = """const [selector, done] = arguments;
const found = () => document.querySelector(selector);
if (found()) { done({shown: performance.now(), already: true}); return; }
new MutationObserver((_, observer) => {
  if (found()) { observer.disconnect(); done({shown: performance.now(), already: false}); }
}).observe(document, {subtree: true, childList: true});"""

PAINTS = "return performance.getEntriesByType('paint').map(entry => [entry.name, entry.startTime]);"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class WebDriver:
    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        options = {"binary": CHROMIUM,
                   "args": CHROMIUM_FLAGS + [f"--user-data-dir={tempfile.mkdtemp()}"]}
        capabilities = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
        self.session = self.call("POST", "/session", capabilities)["value"]["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                         method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as answer:
            return json.load(answer)

    def session_call(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)["value"]

    def close(self):
        self.call("DELETE", f"/session/{self.session}")
        self.process.kill()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    console, prefix, history_key = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    pages = [
        ("cluster", "/ui/cluster", "tr[data-member-id]"),
        ("keys (root)", "/ui/keys", "[data-testid=key-list] li"),
        (f"keys ({prefix})", f"/ui/keys?prefix={prefix}", "[data-testid=key-list] li"),
        ("history", f"/ui/history?key={history_key}", "[data-testid=timeline] li"),
        ("conflicts", "/ui/conflicts", "[data-testid=conflict-chart] svg"),
        ("leases", "/ui/leases", "[data-testid=leases] p, [data-testid=leases] table"),
    ]
    driver = WebDriver()
    try:
        for round_number in range(rounds):
            for name, path, selector in pages:
                driver.session_call("POST", "/url", {"url": console + path})
                paints = dict(driver.session_call("POST", "/execute/sync",
                                                  {"script": PAINTS, "args": []}))
                shown = driver.session_call("POST", "/execute/async",
                                            {"script": WAIT_FOR_SELECTOR, "args": [selector]})
                paint = paints.get("first-contentful-paint") or 0.0
                note = " (already at first look)" if shown["already"] else ""
                print(f"round {round_number} {name:40s} first contentful paint {paint:6.1f} ms"
                      f"   data shown by {shown['shown']:6.1f} ms{note}")
    finally:
        driver.close()


if __name__ == "__main__":
    main()
