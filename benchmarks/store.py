"""EventStore benchmark: append cost against stream size, bytes written per stream, list() over many streams.

Run: `PYTHONPATH=. python benchmarks/store.py` (uses a temporary directory; Linux for the byte counts).
"""

import json
import statistics
import tempfile
import time
from pathlib import Path

from anges.store import records
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream, EventSummary, ShellRun

APPENDS = 500
SIZES = (10, 1_000, 10_000)


def action(i: int) -> Event:
    """A typical action event: a command, its reasoning and about 1 KB of output."""
    return Event(
        "action",
        reasoning=f"Step {i}: look at the files.",
        content=f"ls -la /srv/{i}\n" + "x" * 1000,
        data={"exit_code": 0, "duration": 0.01},
    )


def append_cost(store: EventStore, size: int) -> tuple[float, float]:
    """Median microseconds of one add_event + sync on a stream of `size` events, and of a 0.1.x-style rewrite."""
    stream = EventStream(title=f"{size} events")
    stream.events_list = [action(i) for i in range(size)]
    store.save(stream)
    rewrite = store.root / "rewrite.json"
    rewrites = []
    for _ in range(5):
        start = time.perf_counter()
        rewrite.write_text(json.dumps(stream.to_dict()))
        rewrites.append(time.perf_counter() - start)
    timings = []
    for i in range(APPENDS):
        event = action(size + i)
        start = time.perf_counter()
        stream.add_event(event)
        store.sync(stream)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6, statistics.median(rewrites) * 1e6


def wchar() -> int:
    """Bytes this process has passed to write calls so far (Linux /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def bytes_written(store: EventStore, count: int = 1_000) -> tuple[int, int]:
    """Bytes written to build a `count`-event stream one sync per event (as an agent does), and its final size."""
    stream = EventStream(title="bytes")
    start = wchar()
    stream.add_event(Event("new_request", content="Do the thing."))
    store.sync(stream)
    stream.title = "A model-written title"
    stream.update_settings({"model": "openai", "cmd_init_dir": "/srv"})
    for i in range(1, count - 1):
        stream.add_event(action(i))
        if i % 100 == 0:
            stream.event_summaries_list.append(EventSummary("summary", i - 99, i, "Summary of a hundred steps."))
        store.sync(stream)
    stream.add_event(Event("task_completion", content="Done."))
    store.sync(stream)
    written = wchar() - start
    return written, (store.root / f"{stream.uid}.jsonl").stat().st_size


def list_cost(store: EventStore, count: int = 2_000) -> tuple[float, float]:
    """Milliseconds of list() over `count` streams: first call, then the median of five more."""
    for i in range(count):
        stream = EventStream(title=f"stream {i}", agent_type="default")
        stream.events_list = [Event("new_request", content="hi"), action(0), Event("task_completion")]
        store.save(stream)
    start = time.perf_counter()
    assert len(store.list()) == count
    first = time.perf_counter() - start
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        store.list()
        runs.append(time.perf_counter() - start)
    return first * 1e3, statistics.median(runs) * 1e3


def command(i: int) -> Event:
    """A RUN_SHELL_CMD result as the action records it: the facts, and the text the model reads made of them."""
    output = "".join(f"src/module_{i}_{n}.py: 42 lines\n" for n in range(30))  # about 1 KB
    event = Event("action", reasoning=f"Step {i}: count the lines.", message=f"ran `wc -l src/*.py` ({i})",
                  data={"command": "wc -l src/*.py", "exit_code": 0, "stdout": output, "stderr": "", "duration": 0.012,
                        "timed_out": False, "interrupted": False, "stdout_omitted": 0, "stderr_omitted": 0,
                        "pid": None, "log_path": None, "action_type": "RUN_SHELL_CMD", "sandbox": "bwrap",
                        "escalated": False})
    event.content = ShellRun.of(event).text()
    return event


def command_stream_size(store: EventStore, count: int = 1_000) -> tuple[int, int]:
    """The file of a stream of `count` command results, and the bytes its records take with each output stored
    twice (in the content too), as format 1 wrote them."""
    stream = EventStream(title="commands")
    stream.events_list = [command(i) for i in range(count)]
    store.save(stream)
    events = list(enumerate(stream.events_list))
    twice = sum(len(records.dumps({"kind": "event", "index": i, **e.to_dict()})) for i, e in events)
    once = sum(len(records.dumps(records.event_record(e, i))) for i, e in events)
    return (store.root / f"{stream.uid}.jsonl").stat().st_size, twice - once


STEP = '{"analysis": "", "reasoning": "step", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "echo hi"}]}'
DONE = '{"analysis": "", "reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "Done."}]}'


def trivial_steps(root: Path, count: int = 100) -> tuple[float, float]:
    """Bytes per step of a real run of `count` steps that each run `echo hi` (scripted model, no sandbox): as
    stored now (format 3), and as format 2 stored the same events (every field and fact, content left out)."""
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.models.scripted import is_summary_prompt

    calls = []

    def model(prompt: str, temperature: float = 0.0) -> str:
        if is_summary_prompt(prompt):
            return "Ran `echo hi` several times."
        calls.append(prompt)
        return STEP if len(calls) <= count else DONE

    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}, "agents": {"common": {
        "max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0}}})
    store = EventStore(root)
    with tempfile.TemporaryDirectory() as work:
        stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config,
                              store=store).run_with_new_request("say hi many times")
    steps = [(i, e) for i, e in enumerate(stream.events_list) if e.type == "action"]
    now = sum(len(records.dumps(records.event_record(e, i))) for i, e in steps) / len(steps)
    before = sum(len(records.dumps(format_2_record(e, i))) for i, e in steps) / len(steps)
    return now, before


def format_2_record(event: Event, index: int) -> dict:
    record = {"kind": "event", "index": index, **event.to_dict()}
    if event.content and records.derived_content(event) == event.content:
        del record["content"]
    return record


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(f"| events in stream | one append (median of {APPENDS}) | whole-file rewrite (0.1.x style) |")
        print("|---:|---:|---:|")
        for size in SIZES:
            append, rewrite = append_cost(EventStore(Path(tmp) / f"append{size}"), size)
            print(f"| {size:,} | {append:.0f} µs | {rewrite:,.0f} µs |")
        written, final = bytes_written(EventStore(Path(tmp) / "bytes"))
        print(
            f"\n1,000-event stream: {written:,} bytes written, final file {final:,} bytes, ratio {written / final:.3f}"
        )
        size, saved = command_stream_size(EventStore(Path(tmp) / "commands"))
        print(f"\n1,000 command results (1 KB output each): file {size:,} bytes; with each output stored twice "
              f"(format 1) it would be {size + saved:,} bytes ({saved / size:.0%} larger)")
        now, before = trivial_steps(Path(tmp) / "trivial")
        print(f"\na trivial step (`echo hi`, one model call): {now:.0f} bytes on disk; {before:.0f} as format 2 "
              "stored it")
        first, warm = list_cost(EventStore(Path(tmp) / "list"))
        print(f"\nlist() over 2,000 streams: {first:.1f} ms first call, {warm:.1f} ms median of 5 more")


if __name__ == "__main__":
    main()
