"""Model calls per task with and without TASK_COMPLETE's `only_if_succeeded`, on scripted multi-step tasks.

Each task runs through the real agent, runner and store (a temporary ANGES_HOME), once as a model that sends its
completion in a reply of its own after reading the passing check, once as one that ends the reply that runs the
check with `"only_if_succeeded": true`. Prints, per task and in all: model calls, the prompt characters sent, and
billed input tokens with the provider's prompt cache counted (4 characters a token; the prefix a prompt shares
with the previous one read from the cache at 0.1x). The second task's first check fails: the conditional
completion is dropped, and the model reads why. Run:
    python benchmarks/completion_calls.py
"""

import json
import os
import tempfile

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.scripted import ScriptedModel  # noqa: E402

TEST = "python3 test_calc.py"
CALC_WRONG = "def add(a, b):\n    return a - b\n"
CALC_RIGHT = "def add(a, b):\n    return a + b\n"
TEST_FILE = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('1 passed')\n"


def reply(reasoning, *actions):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def write(path, content):
    return {"action_type": "EDIT_FILE", "directive_line": f"NEW_FILE {path}", "content": content}


def done(content, conditional):
    return {"action_type": "TASK_COMPLETE", "content": content, **({"only_if_succeeded": True} if conditional else {})}


def plan(*states):
    steps = ("Read the code", "Fix add()", "Run the test")
    return {"action_type": "UPDATE_PLAN", "plan": [{"step": s, "status": st} for s, st in zip(steps, states)]}


def tasks(conditional: bool) -> dict[str, list]:
    """The scripted replies of each task; with `conditional`, the completion rides with the last check."""
    def finishing(reasoning, *actions, content):
        if conditional:
            return [reply(reasoning, *actions, done(content, True))]
        return [reply(reasoning, *actions), reply("The test passed.", done(content, False))]

    return {
        "fix, test, done": [reply("Read the code first.", shell("cat calc.py test_calc.py")),
                            *finishing("Fix add() and run its test.", write("calc.py", CALC_RIGHT), shell(TEST),
                                       content="Fixed add(); `python3 test_calc.py` passes.")],
        "a fix that fails first": [
            reply("Read the code first.", shell("cat calc.py test_calc.py")),
            reply("Try the fix.", write("calc.py", "def add(a, b):\n    return a * b\n"), shell(TEST),
                  *([done("Fixed.", True)] if conditional else [])),
            *finishing("The product was wrong; use the sum.", write("calc.py", CALC_RIGHT), shell(TEST),
                       content="Fixed add(); the test passes.")],
        "with a plan": [
            reply("Plan, then read.", plan("in_progress", "pending", "pending"), shell("cat calc.py")),
            *finishing("Fix, test, tick off.", write("calc.py", CALC_RIGHT), shell(TEST),
                       plan("completed", "completed", "completed"), content="Fixed add(); the test passes.")],
    }


def billed(prompts: list[str]) -> float:
    """Input tokens billed, a cached read at a tenth: each prompt's prefix shared with the one before is cached."""
    total, previous = 0.0, ""
    for prompt in prompts:
        shared = len(os.path.commonprefix([previous, prompt]))
        total += (len(prompt) - shared) / 4 + shared / 4 * 0.1
        previous = prompt
    return total


def run(name: str, replies: list) -> dict:
    model = ScriptedModel(replies)
    with tempfile.TemporaryDirectory() as work:
        for path, content in (("calc.py", CALC_WRONG), ("test_calc.py", TEST_FILE)):
            with open(os.path.join(work, path), "w") as file:
                file.write(content)
        agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config())
        stream = agent.run_with_new_request(f"Task {name!r}: make `python3 test_calc.py` pass.")
        agent.close()
    kinds = [event.type for event in stream.events_list]
    assert kinds[-1] == "task_completion", kinds
    dropped = [event.content for event in stream.events_list if event.type == "completion_dropped"]
    return {"calls": model.calls, "chars": sum(map(len, model.prompts)), "billed": billed(model.prompts),
            "dropped": dropped, "last": len(model.prompts[-1])}


def main() -> None:
    rows = {name: (run(name, before), run(name, after))
            for (name, before), after in zip(tasks(False).items(), tasks(True).values())}
    print(f"{'task':<24} {'calls':>11} {'prompt characters':>21} {'billed input tokens':>23}")
    print(f"{'':<24} {'before after':>11} {'before    after':>21} {'before     after':>23}")
    totals = [0, 0, 0, 0, 0.0, 0.0]
    for name, (before, after) in rows.items():
        print(f"{name:<24} {before['calls']:>6} {after['calls']:>4} {before['chars']:>10,} {after['chars']:>10,} "
              f"{before['billed']:>11,.0f} {after['billed']:>11,.0f}")
        for i, value in enumerate((before["calls"], after["calls"], before["chars"], after["chars"],
                                   before["billed"], after["billed"])):
            totals[i] += value
    print(f"{'all':<24} {totals[0]:>6} {totals[1]:>4} {totals[2]:>10,} {totals[3]:>10,} {totals[4]:>11,.0f} "
          f"{totals[5]:>11,.0f}")
    print(f"\ncalls {totals[1] / totals[0] - 1:+.0%}, prompt characters {totals[3] / totals[2] - 1:+.0%}, "
          f"billed input tokens {totals[5] / totals[4] - 1:+.0%}")
    print("\nwhat the model read when its completion was dropped:")
    for name, (_, after) in rows.items():
        for text in after["dropped"]:
            print(f"  {name}: {json.dumps(text)}")


if __name__ == "__main__":
    main()
