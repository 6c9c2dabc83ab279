"""Model calls and billed input tokens per task, with a prompt cache, on scripted multi-step scenarios.

Each scenario is a task driven by scripted replies through the real agent, runner and store (a temporary
ANGES_HOME, real commands in a temporary working directory):

- `log-1mb`: six calls; the first build prints a 1 MB log by mistake, then the model reads a file, fixes it with a
  heredoc script, runs the tests and the build again, and completes.
- `listing-5mb`: six calls; the first command lists 5 MB of paths, then a search, a read, a test run, an edit.
- `medium`: 25 calls reading parts of a file (1-2 KB each), searching it and running the tests.
- `long-fold`: 150 calls of mixed commands (one-liners, every tenth 150 lines, a 3 KB and a 200 KB output now and
  then): a task long enough to fold.
- `orchestrator`: an orchestrator briefs three executors (one at a time); each reads, runs (one prints 1 MB) and
  reports at length; the orchestrator waits for each, checks, and completes.
- `small-events`: 45 one-line commands with a 200,000-token context window: a few dozen small events.
- `many-small`: the same, 300 of them: a long run of small events.

Per scenario it prints the model calls (steps, folds), the prompt characters sent, the output tokens, and the
input tokens billed under three cache models, tokens counted as four characters:

- `none`: every prompt token billed in full (a model without a prompt cache: most local servers).
- `prefix`: automatic prefix caching (OpenAI, DeepSeek, Gemini's implicit cache): the longest common prefix with the
  previous prompt of the same agent is read from the cache at 0.1x, the rest billed in full. No minimum length and
  no block granularity (real caches start at 1,024 tokens and grow in steps of 128): an upper bound of what hits.
- `marks`: Anthropic's `cache_control` breakpoints, on the blocks anges sends (`anges.models.anthropic_model.
  user_content`, from the prompt's `breaks` and `marks`): a cache entry is written for the prefix ending with each
  marked block. A prompt reads from the cache the longest prefix ending at one of its block ends that an earlier
  prompt of the same agent wrote (0.1x); the tokens from there to the end of its last marked block are written
  (1.25x), the rest billed in full. A prompt sent as one plain block is neither read nor written.

"The same agent" is the agent whose call thread (`anges-model-<stream id>`) made the call: its steps, its folds
and its title. The first 1 MB output's share of later prompts is printed for `log-1mb`. Run:
    python benchmarks/billed_tokens.py [--only NAME ...] [--set KEY=VALUE ...] [--json FILE]
"""

import argparse
import json
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import DefaultAgent, Orchestrator
from anges.config.loading import load_config
from anges.models.anthropic_model import user_content
from anges.models.base import Completion, Prompt, Usage
from anges.models.scripted import SUMMARY_PROMPT_MARK, TITLE_PROMPT_MARK

CHARS_PER_TOKEN = 4
CACHED, WRITTEN = 0.1, 1.25
SUMMARY = ("Summary so far. The agent works on the user's request step by step: it ran the commands shown, read the "
           "files it needed and changed only what the request asked for; every command so far ended as expected, "
           "nothing else changed on the machine. ") + (
    "Open: carry on with the next steps until the request is done. " * 18)


def is_fold(prompt: str) -> bool:
    """A fold's prompt: it starts with the summary instruction (anges before issue 44) or ends with it."""
    if prompt.startswith(SUMMARY_PROMPT_MARK):
        return True
    at = prompt.rfind("\n" + SUMMARY_PROMPT_MARK)
    return at >= 0 and "\n## Event " not in prompt[at:]


@dataclass
class Call:
    agent: str
    kind: str  # step, fold, title
    prompt: str
    breaks: tuple
    marks: tuple
    reply: str


@dataclass
class Meter:
    """The scenario's model: answers by `script(agent, kind, prompt, calls of that agent so far)`, records each call."""

    script: object
    context_window: int = 0
    calls: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    name = "bench"

    def __call__(self, prompt, temperature=0.0):
        agent = threading.current_thread().name
        kind = "fold" if is_fold(prompt) else "title" if prompt.startswith(TITLE_PROMPT_MARK) else "step"
        with self.lock:
            done = sum(c.agent == agent and c.kind == "step" for c in self.calls)
        reply = SUMMARY if kind == "fold" else "Scripted task" if kind == "title" else self.script(agent, prompt, done)
        with self.lock:
            self.calls.append(Call(agent, kind, str(prompt), tuple(getattr(prompt, "breaks", ())),
                                   tuple(getattr(prompt, "marks", ())), reply))
        return Completion(reply, usage=Usage(len(prompt) // CHARS_PER_TOKEN, len(reply) // CHARS_PER_TOKEN))


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def billed(calls: list) -> dict:
    """Billed input tokens of `calls` under each cache model (see the module's docstring)."""
    none = prefix = marks = 0.0
    previous: dict[str, str] = {}
    written: dict[str, set] = {}
    for call in calls:
        size = len(call.prompt)
        none += size
        hit = common_prefix(previous.get(call.agent, ""), call.prompt)
        prefix += (size - hit) + CACHED * hit
        previous[call.agent] = call.prompt
        entries = written.setdefault(call.agent, set())
        ends, marked = blocks(call)
        if not marked:
            marks += size
            continue
        read = max((end for end in ends if hash(call.prompt[:end]) in entries), default=0)
        last = max(marked)
        marks += CACHED * read + WRITTEN * max(last - read, 0) + (size - max(read, last))
        entries.update(hash(call.prompt[:end]) for end in marked)
    return {name: round(chars / CHARS_PER_TOKEN) for name, chars in
            (("none", none), ("prefix", prefix), ("marks", marks))}


def blocks(call: Call) -> tuple[list[int], list[int]]:
    """Where the blocks anges sends to Anthropic end, and which of those carry a cache mark."""
    content = user_content(Prompt(call.prompt, call.breaks, call.marks))
    if isinstance(content, str):
        return [], []
    ends, marked, at = [], [], 0
    for block in content:
        at += len(block["text"])
        ends.append(at)
        if block.get("cache_control"):
            marked.append(at)
    return ends, marked


def reply(reasoning, *actions):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def complete(content):
    return {"action_type": "TASK_COMPLETE", "content": content}


APP = "def ratio(a, b):\n    return a / b\n\n\n" + "".join(
    f"def helper_{n}(values):\n    \"\"\"Helper {n}: the sum of the values times {n}.\"\"\"\n"
    f"    return sum(values) * {n}\n\n\n" for n in range(30))
TESTS = ("from src.app import ratio\n\nassert ratio(4, 2) == 2\nassert ratio(1, 0) == 0\nprint('3 passed')\n")
BUILD = ("import sys\nquiet = '--quiet' in sys.argv\nfor n in range(15000):\n    if not quiet:\n"
         "        print(f'[{n:05d}] compiling module_{n}.c with -O2 -Wall ... ok (0.{n % 97:02d} s)')\n"
         "print('ERROR src/app.py:2: ratio() divides by zero when b == 0' if open('src/app.py').read().count('b == 0')"
         " == 0 else 'build ok')\n")
LISTING = "for n in range(70000):\n    print(f'./data/archive/{n // 1000:03d}/records-{n:06d}-part.jsonl.gz')\n"
FIX = ("python3 - <<'EOF'\nimport pathlib\npath = pathlib.Path('src/app.py')\ntext = path.read_text()\n"
       "old = 'def ratio(a, b):\\n    return a / b\\n'\n"
       "new = ('def ratio(a, b):\\n'\n        '    \"\"\"a / b, or 0 when b == 0 (the report divides by counts "
       "that may be zero).\"\"\"\\n'\n        '    if b == 0:\\n'\n        '        return 0\\n'\n"
       "        '    return a / b\\n')\n"
       "assert text.count(old) == 1, 'ratio() is not where it was'\npath.write_text(text.replace(old, new))\n"
       + "".join(f"# check {n}: helper_{n} keeps its behaviour (sum times {n}); nothing else in the file changes\n"
                 for n in range(12))
       + "print('fixed ratio()')\nEOF")


def setup(work: str) -> None:
    os.makedirs(os.path.join(work, "src"))
    files = {"src/__init__.py": "", "src/app.py": APP, "test_app.py": TESTS, "build.py": BUILD, "list.py": LISTING}
    for name, text in files.items():
        with open(os.path.join(work, name), "w") as file:
            file.write(text)


def log_1mb(agent, prompt, done):
    return [reply("Build first to see what fails.", shell("python3 build.py")),
            reply("The build names ratio() in src/app.py: read it.", shell("sed -n 1,30p src/app.py")),
            reply("ratio() must return 0 for b == 0: patch it.", shell(FIX)),
            reply("Run the tests.", shell("python3 test_app.py")),
            reply("And the build.", shell("python3 build.py --quiet")),
            reply("Done.", complete("ratio() returns 0 when b == 0; the tests pass and the build is ok."))][done]


def listing_5mb(agent, prompt, done):
    return [reply("See what data there is.", shell("python3 list.py")),
            reply("Find the code.", shell("find src -name '*.py' | sort")),
            reply("Read it.", shell("sed -n 1,30p src/app.py")),
            reply("Run the tests.", shell("python3 test_app.py")),
            reply("Fix ratio().", {"action_type": "EDIT_FILE", "directive_line": "REPLACE_LINES src/app.py 2-2",
                                   "content": "    return a / b if b else 0"}),
            reply("Done.", complete("ratio() returns 0 when b == 0."))][done]


def long_fold(agent, prompt, done, steps=150):
    if done >= steps:
        return reply("Done.", complete("All steps ran."))
    n = done + 1
    if n == 15:
        command = "seq 1 40000"
    elif n % 25 == 7:
        command = "python3 -c \"print(('x' * 59 + chr(10)) * 50)\""
    elif n % 10 == 0:
        command = "seq 1 150"
    elif n % 3 == 0:
        command = f"sed -n {n % 20 + 1},{n % 20 + 6}p src/app.py"
    else:
        command = f"echo step {n}"
    return reply(f"Step {n} of the plan: run the next check.", shell(command))


def medium(agent, prompt, done, steps=24):
    if done >= steps:
        return reply("Done.", complete("Every helper was checked; the tests pass."))
    commands = ["sed -n 1,45p src/app.py", "grep -n 'def ' src/app.py", "python3 test_app.py",
                "sed -n 45,90p src/app.py", "ls -la src", "git status 2>&1 | head -5"]
    return reply(f"Step {done + 1}: look at the next part.", shell(commands[done % len(commands)]))


BRIEF = ("In the working directory, {task}. Context: the project is a small Python package (src/app.py, test_app.py, "
         "build.py); the tests run with `python3 test_app.py` and the build with `python3 build.py --quiet`. "
         "Constraints: change only what this brief asks for, keep every other helper's behaviour, do not reformat. "
         "{more} When you are done, report: what you changed (files and lines), the commands you ran and their "
         "results, anything you found that the next child should know, and anything left undone. ") * 2
TASKS = {"A": ("read src/app.py and list every helper and what it computes", "Read only; change nothing."),
         "B": ("run the full build and find why it fails", "The build prints a long log; find the error in it."),
         "C": ("make ratio() return 0 when b == 0 and check it", "Use a small patch; run the tests after.")}
REPORT = ("Report of child {name}. I did what the brief asked: {task}. Commands run: sed -n 1,30p src/app.py "
          "(read the module), python3 build.py (the full build), and the tests. Findings: the module defines ratio() "
          "and thirty helpers, helper_N returning sum(values) * N; the build's only error is at src/app.py:2, "
          "ratio() dividing by zero when b == 0. ") + "Detail: every helper was checked against its docstring. " * 30


def orchestrated(agent, prompt, done):
    if "You are anges' orchestrator" in prompt:
        if done == 0:
            return reply("Plan: A reads, B builds, C fixes; one at a time.", *(
                {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                 "agent_input": f"[child {name}] " + BRIEF.format(task=task, more=more)}
                for name, (task, more) in TASKS.items()))
        if done < 3:
            return reply(f"{done} of 3 children returned; wait for the next.", {"action_type": "WAIT_FOR_CHILDREN"})
        if done == 3:
            return reply("Check the fix myself.", shell("python3 test_app.py"))
        return reply("Done.", complete("The three children read, built and fixed; the tests pass."))
    name = re.search(r"\[child (\w)\]", prompt).group(1)
    steps = [shell("sed -n 1,30p src/app.py"), shell("python3 build.py" if name == "B" else "python3 test_app.py"),
             shell(FIX) if name == "C" else shell("echo checked"),
             complete(REPORT.format(name=name, task=TASKS[name][0]))]
    return reply(f"Child {name}, step {done + 1}.", steps[done])


def small_events(agent, prompt, done, steps=45):
    if done >= steps:
        return reply("Done.", complete("All steps ran."))
    return reply(f"Step {done + 1}.", shell(f"echo step {done + 1}" if done % 2 else "ls src"))


def many_small(agent, prompt, done):
    return small_events(agent, prompt, done, steps=300)


SCENARIOS = {"log-1mb": (log_1mb, DefaultAgent, 0), "listing-5mb": (listing_5mb, DefaultAgent, 0),
             "medium": (medium, DefaultAgent, 0), "long-fold": (long_fold, DefaultAgent, 0),
             "orchestrator": (orchestrated, Orchestrator, 0),
             "small-events": (small_events, DefaultAgent, 200_000),
             "many-small": (many_small, DefaultAgent, 200_000)}
REQUESTS = {"log-1mb": "The build fails: find out why and fix it.", "listing-5mb": "Make the tests pass.",
            "medium": "Check each helper of src/app.py against the tests.",
            "long-fold": "Run the checks of the plan, one per step, 150 in all.",
            "orchestrator": "Get ratio() fixed: have it read, built and patched by child agents.",
            "small-events": "Run the 45 steps of the plan, one per step.",
            "many-small": "Run the 300 steps of the plan, one per step."}


def settings(pairs: list) -> dict:
    """`--set a.b.c=value` pairs as config overrides (values read as JSON where they parse)."""
    overrides: dict = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        *path, last = key.split(".")
        place = overrides
        for part in path:
            place = place.setdefault(part, {})
        try:
            place[last] = json.loads(value)
        except ValueError:
            place[last] = value
    return overrides


def merged(base: dict, extra: dict) -> dict:
    return {**base, **{key: merged(base.get(key, {}), value) if isinstance(value, dict) else value
                       for key, value in extra.items()}}


def run(name: str, extra: dict) -> dict:
    script, agent_type, window = SCENARIOS[name]
    meter = Meter(script, context_window=window)
    config = load_config(overrides=merged({
        "agents": {"common": {"max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0},
                   "orchestrator": {"max_concurrent_children": 1}},
        "safety": {"approval": "auto"}}, extra))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        setup(work)
        agent = agent_type(inference_func=meter, cmd_init_dir=work, config=config)
        stream = agent.run_with_new_request(REQUESTS[name])
        agent.close()
    calls = meter.calls
    seconds = round(time.perf_counter() - started, 1)
    result = {"scenario": name, "ended": stream.events_list[-1].type, "seconds": seconds,
              "calls": len(calls), "steps": sum(c.kind == "step" for c in calls),
              "folds": sum(c.kind == "fold" for c in calls), "agents": len({c.agent for c in calls}),
              "prompt_chars": sum(len(c.prompt) for c in calls),
              "output_tokens": sum(len(c.reply) // CHARS_PER_TOKEN for c in calls),
              "largest_prompt": max(len(c.prompt) for c in calls), **billed(calls)}
    if name == "log-1mb":
        result["share_of_1mb_output"] = output_share(calls, "COMMAND: python3 build.py\n")
    return result


def output_share(calls: list, start: str) -> float:
    """Of the prompts after the one that first shows the event starting with `start`, the share its block takes."""
    shown = total = 0
    seen = False
    for call in calls:
        at = call.prompt.find(start)
        if at < 0:
            continue
        if seen:
            end = call.prompt.find("\n## Event ", at)
            shown += (len(call.prompt) if end < 0 else end) - at
            total += len(call.prompt)
        seen = True
    return round(shown / total, 3) if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS), help="run these scenarios only")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="a configuration setting for every scenario, e.g. prompt.history_window_chars=20000")
    options = parser.parse_args()
    results = [run(name, settings(options.set)) for name in options.only or SCENARIOS]
    columns = ("calls", "steps", "folds", "prompt_chars", "none", "prefix", "marks", "output_tokens")
    print(f"{'scenario':<14}" + "".join(f"{c:>14}" for c in columns) + "  ended")
    for result in results:
        print(f"{result['scenario']:<14}" + "".join(f"{result[c]:>14,}" for c in columns) + f"  {result['ended']}")
    total = {c: sum(r[c] for r in results) for c in columns}
    print(f"{'all':<14}" + "".join(f"{total[c]:>14,}" for c in columns))
    for result in results:
        if "share_of_1mb_output" in result:
            print(f"{result['scenario']}: the 1 MB output's block is {result['share_of_1mb_output']:.1%} of the later "
                  "prompts' characters")
    if options.json:
        with open(options.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
