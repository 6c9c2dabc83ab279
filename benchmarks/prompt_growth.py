"""Prompt growth over a long run: 3,000 scripted steps, each a `RUN_SHELL_CMD`, in three requests of 1,000.

Each command prints one line (`echo step N`), every tenth 150 lines (`seq 1 150`): real runs mix short and
long results. A real agent with the default history settings (a fold into the rolling summary every 30
events, the newest 5 kept) and a real store in a temporary ANGES_HOME; the scripted model answers each fold
with a summary of about 250 words. Prints the prompt's size at steps 300, 1,000 and 3,000, and how often,
between two folds, a prompt starts with the whole previous one (and its head: everything before the `# Now`
tail, see `anges.prompt.history`). Run:
    python benchmarks/prompt_growth.py [--steps 3000]
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.scripted import is_summary_prompt  # noqa: E402
from anges.prompt.templates import split_prompt  # noqa: E402

STEP = '{"reasoning": "step %d", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "%s"}]}'
DONE = '{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}'
SUMMARY = ("Summary after fold %d. The agent works through the user's requests by running `echo step N` for each "
           "step in turn; every command so far exited 0 and printed its step number, nothing else changed on the "
           "machine, and no error came up. ") + "Open: carry on with the next steps until the request is done. " * 20
MARKS = (300, 1000, 3000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--per-request", type=int, default=1000)
    args = parser.parse_args()

    calls: list[tuple[str, str]] = []  # ("step" | "fold", prompt)
    steps = 0

    def model(prompt: str, temperature: float = 0.0) -> str:
        nonlocal steps
        if is_summary_prompt(prompt):
            calls.append(("fold", prompt))
            return SUMMARY % sum(kind == "fold" for kind, _ in calls)
        calls.append(("step", prompt))
        if len([kind for kind, _ in calls if kind == "step"]) % (args.per_request + 1) == 0:
            return DONE
        steps += 1
        return STEP % (steps, "seq 1 150" if steps % 10 == 0 else f"echo step {steps}")

    config = load_config(overrides={"agents": {"common": {
        "max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0}}})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config)
        request = 0
        while steps < args.steps:
            request += 1
            agent.run_with_new_request(f"request {request}: run `echo step N` for the next {args.per_request} steps")
    total = time.perf_counter() - started
    ran = sum(event.data.get("exit_code") == 0 for event in agent.event_stream.events_list)

    prompts = [prompt for kind, prompt in calls if kind == "step"]
    sizes = [len(prompt) for prompt in prompts]
    extended = whole = pairs = 0
    shared_at_folds = []
    previous = None
    fold_seen = False
    for kind, prompt in calls:
        if kind == "fold":
            fold_seen = True
            continue
        if previous is not None:
            if fold_seen:
                shared_at_folds.append(len(os.path.commonprefix([previous, prompt])))
            else:
                pairs += 1
                extended += split_prompt(prompt)[0].startswith(split_prompt(previous)[0])
                whole += prompt.startswith(previous)
        previous, fold_seen = prompt, False
    fixed = len(prompts[0].split("# History")[0])

    print(f"steps: {steps} ({ran} commands exited 0)  model calls: {len(calls)} ({len(calls) - len(prompts)} folds)  "
          f"summaries kept: {len(agent.event_stream.event_summaries_list)}  total: {total:.1f} s")
    for mark in MARKS:
        if mark <= len(sizes):
            window = sizes[max(mark - 100, 0):mark]
            print(f"prompt at step {mark}: {sizes[mark - 1]:,} characters "
                  f"(steps {max(mark - 99, 1)}-{mark}: min {min(window):,}, max {max(window):,})")
    last = min(MARKS[-1], len(sizes))
    print(f"ratio step {last} / step {MARKS[0]}: {sizes[last - 1] / sizes[MARKS[0] - 1]:.3f}; "
          f"largest prompt after step {MARKS[0]}: {max(sizes[MARKS[0]:]):,} (before: {max(sizes[:MARKS[0]]):,})")
    folds = sum(len(prompt) for kind, prompt in calls if kind == "fold")
    print(f"characters sent in all: {sum(sizes) + folds:,} ({sum(sizes):,} in steps, {folds:,} in folds)")
    print(f"between folds: {extended} of {pairs} prompts ({extended / pairs:.1%}) start with the previous head, "
          f"{whole} ({whole / pairs:.1%}) with the whole previous prompt")
    print(f"at a fold: the prompt shares {statistics.median(shared_at_folds):,.0f} characters (median) with the one "
          f"before; the fixed part before `# History` is {fixed:,}")


if __name__ == "__main__":
    main()
