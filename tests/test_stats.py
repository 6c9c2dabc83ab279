"""`anges stats`: figures read from the store alone, on streams made by scripted runs (a real provider SDK against a
wire server, real commands, a real approval channel), an anges 0.1.x stream, and a batch whose tasks carry checks."""

import json
import os
import subprocess
import time
from datetime import date, timedelta

from test_batch import ANGES, complete, reply, shell
from wire_servers import TEST_KEY, sleeper

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings, RetryConfig
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import ScriptedModel


def anges(*args, cwd):
    return subprocess.run([*ANGES, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                          env=os.environ.copy())


def stats_json(*args, cwd):
    out = anges("stats", "--json", *args, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def priced_run(tmp_path, openai_server, monkeypatch):
    """A run on the OpenAI wire server: three calls of known usage and price, a 0.3 s command, an edit."""
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    for step in (shell("sleep 0.3"), reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE a.txt",
                                             "content": "a\n"}), complete("Slept and wrote a.txt.")):
        openai_server.enqueue_text(json.dumps(step), input_tokens=1000, output_tokens=50, cached_tokens=600)
    model = OpenAIModel(ModelPreset("openai", "gpt-test", base_url=openai_server.base_url,
                                    api_key_env="OPENAI_API_KEY"), ModelSettings(), RetryConfig(3, 10, 0.01, 0.01),
                        sleep=sleeper()[1])
    config = load_config(overrides={"prices": {"gpt-test": {"input": 2.0, "output": 8.0, "cached_input": 0.5}},
                                    "safety": {"approval": "auto"}})
    work = tmp_path / "priced"
    work.mkdir()
    return DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("sleep, write")


def waiting_run(tmp_path):
    """A scripted run whose command waits 0.4 s for a person's approval and that then runs out of steps."""
    def slow_yes(request):
        time.sleep(0.4)
        return "allow"

    config = load_config(overrides={"safety": {"approval": "ask", "rules": [
        {"action": "RUN_SHELL_CMD", "match": "echo asked", "decision": "ask"}]},
        "agents": {"common": {"max_number_of_events_to_exhaust": 2}}})
    work = tmp_path / "waiting"
    work.mkdir()
    agent = DefaultAgent(inference_func=ScriptedModel([shell("echo asked"), shell("echo again"), shell("echo more")]),
                         cmd_init_dir=work, config=config, approval=slow_yes)
    return agent.run_with_new_request("ask first")


def test_stats_per_run_and_in_total_from_the_recorded_facts(tmp_path, openai_server, monkeypatch):
    priced = priced_run(tmp_path, openai_server, monkeypatch)
    waited = waiting_run(tmp_path)

    data = stats_json(cwd=tmp_path)
    runs = {run["id"]: run for run in data["runs"]}
    assert list(runs) == [priced.uid, waited.uid]  # oldest first

    first = runs[priced.uid]
    assert (first["steps"], first["model_calls"], first["requests"]) == (3, 3, 1)
    assert (first["input_tokens"], first["output_tokens"], first["cached_tokens"]) == (3000, 150, 1800)
    assert first["cached_share"] == 0.6 and first["estimated"] is False
    assert first["cost"] == round(3 * (400 * 2.0 + 600 * 0.5 + 50 * 8.0) / 1e6, 6)
    assert first["ends"] == {"completed": 1} and first["commands"] == 1
    seconds = first["seconds"]
    latencies = sum(event.data["latency"] for event in priced.events_list if "latency" in event.data)
    assert seconds["model"] == round(latencies, 3) > 0
    assert 0.3 <= seconds["commands"] < seconds["wall"]
    assert seconds["approval_wait"] == 0 and first["missing"] == {}
    slowest = first["slowest_steps"][0]
    assert (slowest["number"], slowest["what"]) == (2, "RUN_SHELL_CMD sleep 0.3") and slowest["seconds"] >= 0.3
    assert slowest["command"] >= 0.3

    second = runs[waited.uid]
    assert second["ends"] == {"interrupted (event_limit)": 1} and second["approvals"] == 1
    assert 0.4 <= second["seconds"]["approval_wait"] < second["seconds"]["wall"]
    assert second["estimated"] is True and second["cost"] is None

    total = data["total"]
    assert total["runs"] == 2 and total["steps"] == first["steps"] + second["steps"]
    assert total["model_calls"] == first["model_calls"] + second["model_calls"]
    assert total["ends"] == {"completed": 1, "interrupted (event_limit)": 1}
    assert total["cost"] == first["cost"]  # the scripted run had no price: it adds nothing, it is not zero
    assert total["slowest_steps"][0] == slowest or total["slowest_steps"][0]["seconds"] >= slowest["seconds"]

    text = anges("stats", priced.uid, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "steps", "calls"]
    row = lines[1].split()
    assert row[0] == priced.uid and "3,000/150" in lines[1] and "(60%)" in lines[1]
    assert f"${first['cost']:.4f}" in lines[1] and lines[1].rstrip().endswith("completed")
    assert any(line.startswith("total (1 run)") for line in lines) and "ended: completed 1" in lines
    assert any(f"{priced.uid} #2  RUN_SHELL_CMD sleep 0.3  (model " in line for line in lines)


def test_stats_picks_runs_by_date(tmp_path):
    agent = DefaultAgent(inference_func=ScriptedModel([complete()]), cmd_init_dir=tmp_path, config=load_config())
    agent.run_with_new_request("today's run")
    today = date.today().isoformat()
    assert [run["id"] for run in stats_json("--since", today, cwd=tmp_path)["runs"]] == [agent.uid]
    later = anges("stats", "--since", (date.today() + timedelta(days=1)).isoformat(), cwd=tmp_path)
    assert later.returncode == 0 and later.stdout == "" and "no runs since" in later.stderr
    bad = anges("stats", "--since", "last tuesday", cwd=tmp_path)
    assert bad.returncode == 2 and "not a date: 'last tuesday'" in bad.stderr
    unknown = anges("stats", "--batch", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "no batch 'nope'" in unknown.stderr


def test_an_old_stream_says_which_facts_it_did_not_record(tmp_path):
    legacy = {
        "uid": "legacy01", "title": "old work", "created_at": "2025-01-02T03:04:05", "agent_type": "default",
        "parent_event_stream_uids": [], "event_summaries_list": [], "agent_settings": {},
        "events_list": [
            {"type": "new_request", "reasoning": "", "content": "list files", "title": None,
             "created_at": "2025-01-02T03:04:05"},
            {"type": "action", "reasoning": "look", "content": "EXIT CODE: 0\nSTDOUT:\na.txt", "title": None,
             "created_at": "2025-01-02T03:04:09", "est_input_token": 10, "est_output_token": 5},
            {"type": "task_completion", "reasoning": "", "content": "There is a.txt.", "title": None,
             "created_at": "2025-01-02T03:04:11"},
        ],
    }
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    assert anges("import", "legacy.json", cwd=tmp_path).returncode == 0

    (run,) = stats_json("legacy01", cwd=tmp_path)["runs"]
    assert (run["steps"], run["model_calls"], run["input_tokens"], run["commands"]) == (2, 0, 0, 1)
    assert run["missing"] == {"usage": 1, "command_time": 1}
    assert run["seconds"]["wall"] == 6.0 and run["seconds"]["commands"] == 0
    assert run["slowest_steps"][0]["seconds"] == 4.0 and run["slowest_steps"][0]["command"] is None
    text = anges("stats", "legacy01", cwd=tmp_path).stdout
    assert "not recorded: 1 run(s) recorded no token usage" in text
    assert "not recorded: 1 command(s) recorded no duration" in text


def test_a_current_run_without_model_usage_is_not_called_an_old_stream(tmp_path):
    from anges.store.event_store import EventStore
    from anges.store.events import Event, EventStream

    stream = EventStream(title="made in code")  # e.g. by a library user's own loop: facts, no model usage
    for event in (Event("new_request", content="look"),
                  Event("action", content="ls", data={"action_type": "RUN_SHELL_CMD", "command": "ls",
                                                      "exit_code": 0, "duration": 0.1}),
                  Event("task_completion", content="done")):
        stream.add_event(event)
    EventStore().sync(stream)

    (run,) = stats_json(stream.uid, cwd=tmp_path)["runs"]
    assert run["missing"] == {"calls": 1}
    text = anges("stats", stream.uid, cwd=tmp_path).stdout
    assert "0.1.x" not in text and "not recorded: 1 run(s) recorded steps but no model call with them" in text


def test_a_batch_grades_itself_and_stats_gives_its_pass_rate(tmp_path):
    script = tmp_path / "answer.json"
    script.write_text(json.dumps([shell("echo 42 > answer.txt"), complete("Wrote the answer.")]))
    tasks = [
        {"id": "passes", "task": "write 42", "check": "grep -qx 42 answer.txt"},
        {"id": "fails", "task": "write 42", "check": "echo expected 43 >&2; grep -qx 43 answer.txt"},
        {"id": "hangs", "task": "write 42", "check": "sleep 60", "check_timeout": 1},
        {"id": "unchecked", "task": "write 42"},
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({**task, "model": f"scripted:{script}"}) + "\n"
                                                  for task in tasks))
    out = anges("batch", "tasks.jsonl", "--batch-id", "graded", "--sandbox", "off", "-o", "-", cwd=tmp_path)
    assert out.returncode == 5, out.stderr  # every agent completed; two checks failed
    rows = {row["id"]: row for row in map(json.loads, out.stdout.splitlines())}
    assert {task: row["status"] for task, row in rows.items()} == dict.fromkeys(rows, "completed")
    assert {task: row.get("check", "-") for task, row in rows.items()} == {
        "passes": "passed", "fails": "failed", "hangs": "failed", "unchecked": "-"}
    assert rows["fails"]["check_detail"]["exit_code"] == 1 and rows["fails"]["check_detail"]["output"] == "expected 43"
    assert rows["hangs"]["check_detail"]["timed_out"] is True and rows["hangs"]["check_detail"]["duration"] < 10
    assert "checks: 1 of 3 passed (33%)" in out.stderr
    assert "hangs completed" in out.stderr and "check failed (timed out)" in out.stderr
    assert "fails completed" in out.stderr and "check failed (exit code 1)" in out.stderr
    assert "passes completed" in out.stderr and "check passed" in out.stderr
    table = {cells[0]: cells[1] for cells in map(str.split, out.stderr.splitlines())
             if cells[:1] in (["succeeded"], ["failed"], ["total"])}
    assert table == {"succeeded": "2", "failed": "2", "total": "4"}, "a failed check counts as failed, as listed below"
    assert sum(line.startswith("failed: ") for line in out.stderr.splitlines()) == 2

    data = stats_json("--batch", "graded", cwd=tmp_path)
    assert data["checks"] == {"passed": 1, "failed": 2, "not_run": 0}
    checks = {run["batch_task"]: (run.get("check") or {}).get("status") for run in data["runs"]}
    assert checks == {"passes": "passed", "fails": "failed", "hangs": "failed", "unchecked": None}
    assert data["total"]["runs"] == 4 and data["total"]["ends"] == {"completed": 4}
    text = anges("stats", "--batch", "graded", cwd=tmp_path).stdout
    assert "checks: 1 of 3 passed (33%)" in text and "completed; check failed (timed out)" in text

    again = anges("batch", "tasks.jsonl", "--batch-id", "graded", "--sandbox", "off", cwd=tmp_path)
    assert again.returncode == 5 and "checks: 1 of 3 passed (33%)" in again.stderr  # kept from the log
