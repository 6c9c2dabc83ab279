"""Make docs/terminal.png and docs/terminal-answer.png: the interactive session on a real pseudo-terminal, read
through a terminal emulator (pyte) and drawn by Chromium, with a scripted model and real commands.

    .venv/bin/python docs/terminal_screenshot.py [OUTPUT-DIR]

Runs in a temporary ANGES_HOME and project directory; needs Chromium (/usr/bin/chromium) and playwright.
"""

import html
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from screenshot import ARGS, CHROMIUM, REPORT, SALES, SCRIPT, TEST  # noqa: E402
from terminal_screen import ALT_ENTER, Terminal  # noqa: E402

COLUMNS, ROWS = 110, 36
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: '*pytest*', decision: ask, reason: the tests run " \
        "the project's code}\nprices:\n  scripted: {input: 3.0, output: 15.0}\n"
PALETTE = {"black": "#1e1e1e", "red": "#e06c75", "green": "#98c379", "brown": "#e5c07b", "blue": "#61afef",
           "magenta": "#c678dd", "cyan": "#56b6c2", "white": "#dcdfe4", "brightblack": "#7f848e",
           "brightred": "#ff7b86", "brightgreen": "#b5e890", "brightbrown": "#ffd68a", "brightblue": "#7cc4ff",
           "brightmagenta": "#de9bf0", "brightcyan": "#7fd6e0", "brightwhite": "#ffffff"}
FOREGROUND, BACKGROUND = "#dcdfe4", "#1e1e1e"
"""pyte names the colours of SGR 33 and 93 brown and brightbrown (the terminals' yellow)."""


def colour(value: str, default: str) -> str:
    """A pyte colour (a name, or hex digits) as CSS."""
    return default if value == "default" else PALETTE.get(value, f"#{value}")


def screen_html(screen) -> str:
    """The emulator's screen as HTML: one span per run of cells drawn alike."""
    rows = []
    for y in range(screen.lines):
        line, spans, run, style = screen.buffer[y], [], "", None
        for x in range(screen.columns):
            char = line[x]
            fg, bg = colour(char.fg, FOREGROUND), colour(char.bg, BACKGROUND)
            if char.reverse:
                fg, bg = bg, fg
            css = (f"color:{fg};background:{bg};" + ("font-weight:bold;" if char.bold else "")
                   + ("font-style:italic;" if char.italics else "") + ("text-decoration:underline;"
                                                                       if char.underscore else ""))
            if css != style and run:
                spans.append(f'<span style="{style}">{html.escape(run)}</span>')
                run = ""
            style = css
            run += char.data or " "
        spans.append(f'<span style="{style}">{html.escape(run)}</span>')
        rows.append("".join(spans))
    return ("<html><body style='margin:0;background:#1e1e1e'><pre id='term' style='margin:0;padding:14px 16px;"
            "font:15px/1.25 \"DejaVu Sans Mono\",monospace;background:#1e1e1e;display:inline-block'>"
            + "\n".join(rows) + "</pre></body></html>")


def shoot(screen, path: Path, browser) -> None:
    page = browser.new_page(device_scale_factor=1)
    page.set_content(screen_html(screen))
    page.locator("#term").screenshot(path=str(path))
    page.close()
    print(f"wrote {path}")


def main(argv):
    out = Path(argv[0]) if argv else HERE
    home = Path(tempfile.mkdtemp(prefix="anges-shot-"))
    project = home / "sales-report"
    project.mkdir()
    (project / "report.py").write_text(REPORT)
    (project / "sales.csv").write_text(SALES)
    (project / "test_report.py").write_text(TEST)
    (project / ".anges.yaml").write_text(RULES)
    (home / "script.json").write_text(json.dumps(SCRIPT))
    env = {**os.environ, "ANGES_HOME": str(home / "home"), "TERM": "xterm-256color", "COLORTERM": ""}
    env.pop("NO_COLOR", None)

    from playwright.sync_api import sync_playwright

    term = Terminal(["--config", ".anges.yaml", "--model", f"scripted:{home / 'script.json'}"], cwd=project,
                    env=env, columns=COLUMNS, rows=ROWS)
    try:
        term.wait_for("sandbox", on_screen=True)
        term.send("Add a --json flag to report.py that prints the totals as JSON,")
        term.send(ALT_ENTER)
        term.send("and test it.\r")
        term.wait_for("y yes · n no · a always", on_screen=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            shoot(term.screen, out / "terminal.png", browser)
            term.send("y")
            term.wait_for("completed in")
            shoot(term.screen, out / "terminal-answer.png", browser)
            browser.close()
        term.send("\x04")
        term.wait()
    finally:
        term.close()


if __name__ == "__main__":
    main(sys.argv[1:])
