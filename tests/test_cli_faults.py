"""What the `anges` command exits with when the model fails, through the real OpenAI SDK and a loopback server."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wire_servers import Scripted

from anges.store.event_store import EventStore

ANGES = [sys.executable, "-m", "anges"]
README = Path(__file__).resolve().parent.parent / "README.md"


def run(server, tmp_path, *extra):
    config = tmp_path / "fast-retries.yaml"
    config.write_text("retry: {max_attempts: 3, initial_backoff: 0.01, max_backoff: 0.02}\n")
    return subprocess.run([*ANGES, "-q", "do it", "--model", "openai:test-model", "--config", str(config), *extra],
                          cwd=tmp_path, env={**os.environ, **server.env}, capture_output=True, text=True, timeout=60,
                          check=False)


def last_event():
    infos = EventStore().list()
    assert len(infos) == 1, infos
    return EventStore().load(infos[0].uid).events_list[-1]


@pytest.mark.parametrize("status, says", [(401, "rejected the API key"), (403, "denied access"),
                                          (404, "'test-model' not found")])
def test_a_rejected_key_or_unknown_model_is_a_configuration_error(openai_server, tmp_path, status, says):
    openai_server.enqueue_error(status)
    out = run(openai_server, tmp_path)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr
    assert len(openai_server.requests) == 1
    event = last_event()
    assert event.type == "task_interrupted" and event.data["reason"] == "model_setup"


def test_a_model_that_keeps_failing_stops_the_run_with_exit_4(openai_server, tmp_path):
    openai_server.enqueue(Scripted(200, body="<html>502 Bad Gateway</html>"), times=3)
    out = run(openai_server, tmp_path, "--output", "json")
    assert out.returncode == 4, out.stderr
    assert len(openai_server.requests) == 3
    assert '"reason": "model_error"' in out.stdout and "not JSON" in out.stdout
    assert "unexpected error" not in out.stderr and "Traceback" not in out.stderr


def test_an_empty_200_reply_is_retried_and_the_run_goes_on(openai_server, tmp_path):
    openai_server.enqueue(Scripted(200, body=""))
    openai_server.enqueue_text('{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}')
    out = run(openai_server, tmp_path)
    assert out.returncode == 0, out.stderr
    assert len(openai_server.requests) == 2
    assert last_event().type == "task_completion"


def exit_code_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+0\s+the task was completed", line))
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(" ".join(line.split()))
    return block


def test_the_readme_lists_the_exit_codes_of_anges_help():
    shown = subprocess.run([*ANGES, "--help"], capture_output=True, text=True, check=True).stdout
    help_codes = exit_code_block(shown)
    assert [line.split()[0] for line in help_codes if line.split()[0].isdigit()] == ["0", "3", "4", "2", "1"]
    assert exit_code_block(README.read_text(encoding="utf-8")) == help_codes


def test_a_server_that_counts_cached_tokens_but_no_input_tokens_still_gets_its_status_line(openai_server, tmp_path):
    """Its usage is half filled in (cached tokens, no prompt tokens): the run ends as it should, and the last line
    leaves out the share of input read from the cache."""
    openai_server.enqueue_text('{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}',
                               input_tokens=0, cached_tokens=40)
    out = run(openai_server, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "completed in" in out.stderr and "cached" not in out.stderr, out.stderr
    assert last_event().data["usage"]["cached_tokens"] == 40


def test_the_live_status_line_leaves_out_the_cache_share_when_no_input_was_counted():
    from anges.cli.status import Usage
    from anges.store.events import Event

    usage = Usage()
    usage.add(Event("task_completion", content="ok", data={
        "usage": {"input_tokens": 0, "output_tokens": 5, "cached_tokens": 40, "model_calls": 1}}))
    assert usage.parts() == ["0 steps", "5 tokens"], "an answer is not a step"
