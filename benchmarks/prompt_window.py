"""Prompt size over a long run for a 4k, a 32k and a 200k-token context window.

300 scripted steps in one request, each a `RUN_SHELL_CMD` through the real agent, runner and store (a temporary
ANGES_HOME), with the default history settings scaled to each window (`anges.prompt.sizing`). Each command prints
one line (`echo step N`), every tenth 150 lines (`seq 1 150`). The model reports the prompt tokens a tokenizer of
four characters a token would count, as a real provider does, so the estimate is corrected as the run goes; it
answers each fold with a summary of about 250 words. Prints, per window: the prompt's size at steps 1, 50, 100,
200 and 300 (characters and reported tokens), the largest, the room a prompt has, and the folds. Run:
    python benchmarks/prompt_window.py [--steps 300]
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.base import Completion, Usage  # noqa: E402
from anges.models.scripted import is_summary_prompt  # noqa: E402
from anges.models.window import prompt_room  # noqa: E402

STEP = '{"reasoning": "step %d", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "%s"}]}'
DONE = '{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}'
SUMMARY = ("Summary after fold %d. The agent works through the user's request by running `echo step N` for each "
           "step in turn; every command so far exited 0 and printed its step number, nothing else changed on the "
           "machine, and no error came up. ") + "Open: carry on with the next steps until the request is done. " * 20
WINDOWS = (4_096, 32_768, 200_000)
MARKS = (1, 50, 100, 200, 300)
CHARS_PER_TOKEN = 4


def run(window: int, steps: int) -> dict:
    calls: list[tuple[str, str]] = []

    def model(prompt: str, temperature: float = 0.0) -> Completion:
        kind = "fold" if is_summary_prompt(prompt) else "step"
        calls.append((kind, prompt))
        done = sum(k == "step" for k, _ in calls)
        text = (SUMMARY % sum(k == "fold" for k, _ in calls) if kind == "fold" else
                DONE if done > steps else STEP % (done, "seq 1 150" if done % 10 == 0 else f"echo step {done}"))
        return Completion(text, usage=Usage(len(prompt) // CHARS_PER_TOKEN, len(text) // CHARS_PER_TOKEN))

    model.context_window = window
    config = load_config(overrides={"agents": {"common": {
        "max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0}}})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config)
        stream = agent.run_with_new_request(f"run `echo step N` for the next {steps} steps")
    sizes = [len(prompt) for kind, prompt in calls if kind == "step"]
    folds = [len(prompt) for kind, prompt in calls if kind == "fold"]
    return {"sizes": sizes, "folds": folds, "seconds": time.perf_counter() - started,
            "fixed": sizes and len(next(p for k, p in calls if k == "step").split("\n# History\n")[0]),
            "limits": agent._prompter.sizing.prompt,  # the limits scaled to the window
            "ok": stream.events_list[-1].type == "task_completion",
            "room": prompt_room(window, config.model_settings.max_output_tokens)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    for window in WINDOWS:
        result = run(window, args.steps)
        sizes, room = result["sizes"], result["room"]
        tokens = lambda chars: chars // CHARS_PER_TOKEN  # noqa: E731
        marks = ", ".join(f"{mark}: {sizes[mark - 1]:,} ({tokens(sizes[mark - 1]):,} t)" for mark in MARKS
                          if mark <= len(sizes))
        biggest = max(sizes + result["folds"])
        limits = result["limits"]
        print(f"{window:,}-token window: {'completed' if result['ok'] else 'STOPPED'}, {len(result['folds'])} folds, "
              f"{result['seconds']:.1f} s")
        print(f"  prompt at step {marks}")
        print(f"  largest prompt (folds too): {biggest:,} characters, {tokens(biggest):,} tokens reported; "
              f"room for a prompt: {room:,} tokens ({'within' if tokens(biggest) <= room else 'OVER'}); "
              f"fixed part {result['fixed']:,} characters")
        print(f"  scaled limits: history window {limits.history_window_chars:,}, event {limits.max_event_chars:,}, "
              f"summary {limits.max_summary_chars:,}, prompt {limits.max_prompt_chars:,} characters")


if __name__ == "__main__":
    main()
