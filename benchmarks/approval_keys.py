"""How soon a person who reads an approval and presses y is answered, on a real pseudo-terminal (`anges -q`):

- question to keys: from the question on the screen to its keys (the read time, READ_SECONDS, plus drawing);
- y to approved: from writing `y` to the terminal to the decision drawn (`✓ approved by you`).

RUNS runs, each a fresh `anges -q` whose one command asks. Run: `.venv/bin/python benchmarks/approval_keys.py`
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HOME = tempfile.mkdtemp(prefix="anges-bench-")
os.environ["ANGES_HOME"] = HOME
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from terminal_screen import Terminal  # noqa: E402

RUNS = 10
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo ask-*', decision: ask, reason: asks}\n"
KEYS = "y yes · n no · a always… · t no, and tell the agent why"


def one_run(work: Path) -> tuple[float, float]:
    replies = [{"analysis": "", "reasoning": "run it", "actions": [{"action_type": "RUN_SHELL_CMD",
                                                                    "command": "echo ask-me"}]},
               {"analysis": "", "reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}]
    (work / "replies.json").write_text(json.dumps(replies))
    (work / "rules.yaml").write_text(RULES)
    term = Terminal(["-q", "go", "--config", "rules.yaml", "--model", f"scripted:{work / 'replies.json'}"], cwd=work)
    try:
        term.wait_for("│ echo ask-me", on_screen=True)
        shown = time.monotonic()
        term.wait_for(KEYS, on_screen=True, timeout=10)
        keys = time.monotonic()
        term.send("y")
        term.wait_for("✓ approved by you", timeout=10)
        approved = time.monotonic()
        term.wait()
    finally:
        term.close()
    return keys - shown, approved - keys


def main() -> None:
    readings, answers = [], []
    for number in range(RUNS):
        work = Path(tempfile.mkdtemp(prefix=f"anges-bench-approval-{number}-"))
        read, answer = one_run(work)
        readings.append(read * 1000)
        answers.append(answer * 1000)
    print(f"question to keys: median {statistics.median(readings):.0f} ms, max {max(readings):.0f} ms ({RUNS} runs)")
    print(f"y to approved:    median {statistics.median(answers):.1f} ms, max {max(answers):.1f} ms; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
