"""Web chat benchmark: opening a 2000-step chat, the server's feed alone and the page in headless Chromium.

Run: `.venv/bin/python benchmarks/web_feed.py` (uses a temporary ANGES_HOME; the page figure needs Chromium
and Playwright, as the browser tests do).
"""

import os
import statistics
import tempfile
import threading
import time
import urllib.request

os.environ["ANGES_HOME"] = tempfile.mkdtemp(prefix="anges-bench-")

from anges.config.loading import load_config  # noqa: E402
from anges.store.event_store import EventStore  # noqa: E402
from anges.store.events import Event, EventStream  # noqa: E402

STEPS = 2000
RUNS = 5


def long_chat(store: EventStore) -> str:
    """A finished chat of STEPS steps: commands with a few lines of output, and short Markdown answers."""
    stream = EventStream(title="A long chat")
    stream.add_event(Event("new_request", content="Do two thousand things."))
    for n in range(1, STEPS):
        if n % 2:
            stream.add_event(Event("action", reasoning=f"Step **{n}**: list `dir{n}`.",
                                   data={"command": f"ls dir{n}", "exit_code": 0, "duration": 0.1,
                                         "stdout": "".join(f"file{k}.txt\n" for k in range(8))}))
        else:
            stream.add_event(Event("agent_text_response", content=f"Checked *{n}* of them; [notes](https://x.example)."))
    store.sync(stream)
    return stream.uid


def main() -> None:
    from anges.web import create_app
    from werkzeug.serving import make_server

    store = EventStore()
    uid = long_chat(store)
    app = create_app(load_config(), store, password="", token="")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.port}"

    feed = []
    for _ in range(RUNS):
        start = time.perf_counter()
        size = len(urllib.request.urlopen(f"{url}/api/chats/{uid}/events").read())
        feed.append(time.perf_counter() - start)
    print(f"feed of {STEPS} steps: median {statistics.median(feed) * 1000:.0f} ms of {RUNS} ({size / 1e6:.2f} MB)")

    pages = page_timings(url, uid)
    if pages:
        print(f"page showing all {STEPS} steps: median {statistics.median(pages) * 1000:.0f} ms of {RUNS}")
    server.shutdown()


def page_timings(url: str, uid: str) -> list[float]:
    """Seconds from navigating to the chat until the page shows every step, RUNS times."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("page: skipped (Playwright is not installed)")
        return []
    chromium = os.environ.get("ANGES_CHROMIUM") or "/usr/bin/chromium"
    timings = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 820})
        for _ in range(RUNS):
            start = time.perf_counter()
            page.goto(f"{url}/chat/{uid}")
            page.wait_for_function(f"() => document.querySelectorAll('#steps > li.step').length === {STEPS}",
                                   polling="raf")
            timings.append(time.perf_counter() - start)
        browser.close()
    return timings


if __name__ == "__main__":
    main()
