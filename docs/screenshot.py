"""Make docs/screenshot.png: a finished run in the web chat, with a scripted model and real commands.

    .venv/bin/python docs/screenshot.py [OUTPUT.png] [--phone PHONE.png]

Runs in a temporary ANGES_HOME and project directory; needs Chromium (/usr/bin/chromium) and playwright.
"""

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("ANGES_CHROMIUM", "/usr/bin/chromium")
PASSWORD = "a demo password"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]

REPORT = '''import csv
import sys


def totals(path):
    sums = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            sums[row["region"]] = sums.get(row["region"], 0) + float(row["amount"])
    return sums


if __name__ == "__main__":
    for region, total in sorted(totals(sys.argv[1]).items()):
        print(f"{region:<8}{total:>10.2f}")
'''
SALES = "region,amount\nnorth,120.5\nsouth,80\nnorth,42.25\neast,310\nsouth,19.99\n"
TEST = '''import json
import subprocess
import sys


def test_json_output():
    command = [sys.executable, "report.py", "--json", "sales.csv"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"east": 310.0, "north": 162.75, "south": 99.99}
'''


def reply(reasoning, *actions):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


SCRIPT = [
    reply("Let me look at the project and run the report as it is today.",
          shell("ls && python3 report.py sales.csv")),
    reply("The script prints a fixed-width table. I'll add a `--json` flag with `argparse`, keeping the "
          "table as the default.",
          {"action_type": "EDIT_FILE", "directive_line": "REPLACE_LINES report.py 13-15", "content":
           'if __name__ == "__main__":\n    import argparse\n    import json\n\n'
           '    parser = argparse.ArgumentParser(description="Sales totals by region.")\n'
           '    parser.add_argument("path")\n'
           '    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")\n'
           '    args = parser.parse_args()\n    result = dict(sorted(totals(args.path).items()))\n'
           '    if args.json:\n        print(json.dumps(result))\n    else:\n'
           '        for region, total in result.items():\n            print(f"{region:<8}{total:>10.2f}")\n'}),
    reply("Check both output formats, then run the test that covers the new flag.",
          shell("python3 report.py sales.csv && python3 report.py --json sales.csv"
                " && python3 -m pytest -q test_report.py")),
    {"analysis": "", "reasoning": "Both formats work and the test passes.", "actions": [{
        "action_type": "TASK_COMPLETE", "content":
        "Added a `--json` flag to `report.py`.\n\n"
        "- The table stays the default output; `--json` prints the totals as one JSON object, sorted by region.\n"
        "- Arguments are parsed with `argparse`, so `--help` now documents the flag.\n"
        "- `test_report.py` checks the JSON output: **1 passed**.\n\n"
        "```bash\npython3 report.py --json sales.csv\n```"}]},
]


def main(argv):
    output = Path(argv[0]) if argv and not argv[0].startswith("--") else HERE / "screenshot.png"
    phone = Path(argv[argv.index("--phone") + 1]) if "--phone" in argv else None
    home = Path(tempfile.mkdtemp(prefix="anges-shot-"))
    os.environ["ANGES_HOME"] = str(home / "home")
    project = home / "sales-report"
    project.mkdir()
    (project / "report.py").write_text(REPORT)
    (project / "sales.csv").write_text(SALES)
    (project / "test_report.py").write_text(TEST)

    from anges.web import create_app
    from playwright.sync_api import expect, sync_playwright
    from werkzeug.serving import make_server

    from anges.config.loading import load_config
    from anges.models.scripted import ScriptedModel
    from anges.store.event_store import EventStore
    from anges.store.events import Event, EventStream

    store = EventStore()
    _history(store, Event, EventStream)
    config = load_config(overrides={"prices": {"scripted": {"input": 3.0, "output": 15.0}}})
    model = ScriptedModel(SCRIPT)
    app = create_app(config, store, password=PASSWORD, default_dir=str(project),
                     model_factory=lambda name, cfg, agent_type: model)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 940}, device_scale_factor=1)
            page.goto(url + "/login")
            page.fill("#password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector("#app[data-ready=true]", state="attached")
            page.fill("#message", "Add a --json flag to report.py that prints the totals as JSON, and test it.")
            page.press("#message", "Enter")
            expect(page.locator("#status-pill")).to_have_text("Completed", timeout=30000)
            page.locator(".step-edit details, .long-output").evaluate_all("els => els.forEach(e => e.open = false)")
            page.evaluate("document.getElementById('transcript').scrollTop = 1e9")
            page.evaluate("document.activeElement && document.activeElement.blur()")
            page.mouse.move(5, 5)
            time.sleep(0.3)
            page.screenshot(path=str(output))
            if os.environ.get("ANGES_SHOT_TOP"):
                page.evaluate("document.getElementById('transcript').scrollTop = 0")
                page.screenshot(path=os.environ["ANGES_SHOT_TOP"])
            print(f"wrote {output}")
            if phone:
                mobile = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                          is_mobile=True, has_touch=True)
                mobile.goto(page.url)
                mobile.fill("#password", PASSWORD)
                mobile.click("button[type=submit]")
                expect(mobile.locator("#status-pill")).to_have_text("Completed", timeout=30000)
                mobile.evaluate("document.getElementById('transcript').scrollTop = 1e9")
                time.sleep(0.3)
                mobile.screenshot(path=str(phone))
                print(f"wrote {phone}")
            browser.close()
    finally:
        server.shutdown()


def _history(store, Event, EventStream):
    """A few earlier chats, so the sidebar looks like it does after a few days of use."""
    now = time.time()
    earlier = [
        ("Why does the nightly backup job fail?", "completed", 26),
        ("Upgrade the CI image to Python 3.12", "completed", 27),
        ("Profile the slow import in cli.py", "interrupted", 50),
        ("Which migrations touch the users table?", "help_needed", 51),
    ]
    for title, status, hours in earlier:
        stream = EventStream(title=title)
        stream.add_event(Event("new_request", content=title))
        end = {"completed": "task_completion", "interrupted": "task_interrupted",
               "help_needed": "agent_requested_help"}[status]
        stream.add_event(Event(end, content="..."))
        store.sync(stream)
        if title.startswith("Upgrade"):
            child = EventStream(title="Update the Dockerfile base image", parent_event_stream_uids=[stream.uid],
                                agent_type="task_executor")
            child.add_event(Event("new_request_from_parent", content="update the base image"))
            child.add_event(Event("task_completion", content="done"))
            store.sync(child)
            os.utime(store.root / f"{child.uid}.jsonl", (now - hours * 3600, now - hours * 3600))
            stream.agent_type = "orchestrator"
            stream.events_list.insert(1, Event("child_agent_running", data={"agent_id": child.uid, "starting_from": 0}))
            store.save(stream)
        os.utime(store.root / f"{stream.uid}.jsonl", (now - hours * 3600, now - hours * 3600))
    recent = EventStream(title="Summarize open TODOs in the repo")
    recent.add_event(Event("new_request", content="Summarize open TODOs"))
    recent.add_event(Event("agent_text_response", content="There are 7 TODOs."))
    store.sync(recent)
    os.utime(store.root / f"{recent.uid}.jsonl", (now - 1800, now - 1800))


if __name__ == "__main__":
    main(sys.argv[1:])
