"""Registries by name or module:Class path, plug-ins added in code, and the example plug-in installed for real."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anges.actions import Action, RunShellCommand
from anges.actions.edit import EditFile
from anges.agents import BaseAgent, DefaultAgent, Orchestrator, agent_class
from anges.config.loading import load_config
from anges.exceptions import ConfigError, ModelSetupError
from anges.models import get_model
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import ScriptedModel
from anges.plugins import hookimpl, plugins
from anges.registry import actions, agent_types, providers
from anges.store.event_store import EventStore
from anges.store.events import Event

REPO = Path(__file__).resolve().parents[1]
ANGES = [sys.executable, "-m", "anges"]


def reply(*actions, reasoning="next"):
    return json.dumps({"reasoning": reasoning, "actions": list(actions)})


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


# -- a plug-in defined in code ----------------------------------------------------------------------------------


class Stamp(Action):
    """STAMP: record a word, upper-cased."""

    type = "STAMP"
    guide_prompt = "## STAMP\nFields: `word` (string)."

    def run(self, ctx, args):
        return Event("action", content=f"STAMPED {args['word'].upper()}", message="stamped",
                     data={"action_type": self.type, "agent_type": ctx.agent_type})


class Reviewer(BaseAgent):
    """Reads and stamps; an orchestrator may start it."""

    agent_type = "reviewer"
    template = "agents/task_executor.j2"
    action_types = ("STAMP", "TASK_COMPLETE", "HELP_NEEDED")
    can_be_child = True


class EchoModel:
    """Replies with whatever reply its model id names."""

    def __init__(self, preset, settings=None, retry=None, *, name=""):
        self.name = name
        self.reply = complete(f"echo of {preset.model}")

    def __call__(self, prompt, temperature=0.0):
        return self.reply


class InCode:
    @hookimpl
    def register_actions(self, register):
        register(Stamp)

    @hookimpl
    def register_agent_types(self, register):
        register(Reviewer)

    @hookimpl
    def register_providers(self, register):
        register(EchoModel, name="echo")


@pytest.fixture
def in_code():
    plugin = InCode()
    plugins.register(plugin, name="in-code")
    yield plugin
    plugins.unregister(plugin)


def test_registries_take_names_and_module_class_paths():
    assert actions.get("run_shell_cmd") is RunShellCommand and actions.get("anges.actions.edit:EditFile") is EditFile
    assert providers.get("openai") is OpenAIModel
    assert agent_class("ORCHESTRATOR") is Orchestrator and agent_types.get("anges.agents:DefaultAgent") is DefaultAgent
    assert agent_types.builtin_names == ("default", "task_analyzer", "task_executor", "orchestrator")


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown agent type 'wizard' \(known: default, task_analyzer, "
                                          r"task_executor, orchestrator\)"):
        agent_class("wizard")
    with pytest.raises(ModelSetupError, match=r"unknown provider 'mistral' \(known: openai, gemini, anthropic, ollama\)"):
        providers.get("mistral")
    with pytest.raises(ConfigError, match=r"unknown action 'SHOUT' \(known: RUN_SHELL_CMD, EDIT_FILE"):
        actions.get("SHOUT")


@pytest.mark.parametrize(("path", "message"), [
    ("anges.nowhere:Thing", "cannot import anges.nowhere"),
    ("anges.actions:Nothing", "anges.actions has no 'Nothing'"),
    ("anges.store.events:Event", "is not a subclass of Action"),
])
def test_a_bad_import_path_says_what_is_wrong(path, message):
    with pytest.raises(ConfigError, match=message):
        actions.get(path)


def test_a_plugin_in_code_adds_an_action_an_agent_type_and_a_provider(in_code, tmp_path):
    assert actions.get("STAMP") is Stamp and agent_class("reviewer") is Reviewer
    assert "STAMP" in actions.names() and "reviewer" in agent_types.names() and "echo" in providers.names()
    model = get_model("echo:hello", load_config())
    assert isinstance(model, EchoModel) and model.name == "echo:hello" and "echo of hello" in model("prompt")

    config = load_config(overrides={"agents": {"common": {"max_model_calls": 9}, "default": {"extra_actions": ["stamp"]}}})
    assert config.agent("reviewer").max_model_calls == 9, "a type without a section of its own gets common's settings"
    agent = DefaultAgent(inference_func=ScriptedModel([reply({"action_type": "STAMP", "word": "ok"}), complete()]),
                         cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request("stamp it")
    assert [e.type for e in stream.events_list] == ["new_request", "action", "task_completion"]
    assert stream.events_list[1].content == "STAMPED OK" and stream.events_list[1].data["agent_type"] == "default"


def test_a_plugin_agent_type_has_a_config_section_and_an_orchestrator_delegates_to_it(in_code, tmp_path):
    config = load_config(overrides={"agents": {"reviewer": {"max_model_calls": 7}}})
    assert config.agent("reviewer").max_model_calls == 7

    def model(prompt, temperature=0.0):
        if "CALL_CHILD_AGENT" not in prompt:  # the reviewer's prompt
            return reply({"action_type": "STAMP", "word": "seen"}) if "STAMPED" not in prompt else complete("reviewed")
        if "CHILD_AGENT_TASK_COMPLETION" in prompt:
            return complete("all reviewed")
        return reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT REVIEWER",
                      "agent_input": "review it"})

    orchestrator = Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=config)
    assert "REVIEWER" in orchestrator.child_types()
    stream = orchestrator.run_with_new_request("get it reviewed")
    assert stream.events_list[-1].content == "all reviewed"
    child = EventStore().load(stream.events_list[2].data["agent_id"])
    assert child.agent_type == "reviewer" and [e.content for e in child.events_list][1:] == ["STAMPED SEEN", "reviewed"]


def test_config_sections_are_checked_against_the_registered_types(in_code):
    with pytest.raises(ConfigError, match=r"unknown key 'agents.reveiwer' \(valid keys here: common, default, .*reviewer"):
        load_config(overrides={"agents": {"reveiwer": {}}})


def test_a_broken_plugin_is_left_out_with_the_reason_and_the_rest_works(in_code):
    class Broken:
        @hookimpl
        def register_actions(self, register):
            raise RuntimeError("cannot find my data files")

    broken = Broken()
    plugins.register(broken, name="broken")
    try:
        assert actions.get("STAMP") is Stamp
        assert "cannot find my data files" in plugins.failures["broken"]
        with pytest.raises(ConfigError, match="plug-in 'broken' was left out: its register_actions hook failed"):
            actions.get("NOPE")
    finally:
        plugins.unregister(broken)
        plugins.failures.pop("broken", None)


def test_a_plugin_may_not_take_a_builtin_name_or_misspell_a_hook():
    class Impostor:
        @hookimpl
        def register_actions(self, register):
            register(Stamp, name="RUN_SHELL_CMD")

    class Misspelt:
        @hookimpl
        def register_action(self, register):
            register(Stamp)

    impostor = Impostor()
    plugins.register(impostor, name="impostor")
    try:
        assert "RUN_SHELL_CMD" in actions.names() and actions.get("RUN_SHELL_CMD") is RunShellCommand
        assert "the action name 'RUN_SHELL_CMD' is taken" in plugins.failures["impostor"]
    finally:
        plugins.unregister(impostor)
        plugins.failures.pop("impostor", None)
    with pytest.raises(ValueError, match="register_action"):
        plugins.register(Misspelt(), name="misspelt")


def test_the_web_chat_offers_and_accepts_a_plugin_agent_type(in_code, tmp_path):
    from anges.web import create_app
    from test_web import PASSWORD, csrf_from, login

    app = create_app(load_config(), EventStore(), password=PASSWORD, default_dir=str(tmp_path),
                     model_factory=lambda name, config, agent_type: ScriptedModel([complete()]))
    client = app.test_client()
    assert login(client).status_code == 302
    page = client.get("/").get_data(as_text=True)
    assert "reviewer" in page
    response = client.post("/api/chats", json={"settings": {"agent_type": "reviewer"}},
                           headers={"X-CSRF-Token": csrf_from(page)})
    assert response.status_code == 201, response.json


# -- the example plug-in, installed -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory):
    """examples/plugin installed with pip into a directory of its own (offline: no index, no build isolation)."""
    source = tmp_path_factory.mktemp("plugin-source") / "plugin"
    shutil.copytree(REPO / "examples" / "plugin", source)
    target = tmp_path_factory.mktemp("plugin-site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                           "--no-index", "--target", str(target), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (target / "anges_example_plugin.py").is_file()
    return target


@pytest.fixture
def plugin_on_path(installed_plugin):
    sys.path.insert(0, str(installed_plugin))
    plugins.reload()
    yield installed_plugin
    sys.path.remove(str(installed_plugin))
    sys.modules.pop("anges_example_plugin", None)
    plugins.reload()


def test_the_installed_example_plugin_drives_an_agent(plugin_on_path, tmp_path):
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    config = load_config(overrides={"agents": {"common": {"extra_actions": ["COUNT_LINES"]}}})
    agent = DefaultAgent(inference_func=get_model("lines:notes.txt", config), cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request("How long are the notes?")
    counted, answer = stream.events_list[1], stream.events_list[-1]
    assert counted.data["action_type"] == "COUNT_LINES" and counted.data["lines"] == 3
    assert answer.type == "task_completion" and answer.content == "notes.txt has 3 lines."
    assert "## COUNT_LINES" in agent.render_prompt()


def test_the_installed_example_plugin_through_the_cli(installed_plugin, tmp_path):
    (tmp_path / "notes.txt").write_text("a\nb\n")
    env = {**os.environ, "PYTHONPATH": str(installed_plugin)}
    run = subprocess.run([*ANGES, "--action", "COUNT_LINES", "--model", "lines:notes.txt", "-q", "count the notes"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "notes.txt has 2 lines."
    (tmp_path / "replies.json").write_text(json.dumps([complete()]))
    for model, message in (("lines:notes.txt", "unknown model 'lines:notes.txt'"),
                           (f"scripted:{tmp_path / 'replies.json'}", "unknown action 'COUNT_LINES'")):
        missing = subprocess.run([*ANGES, "--action", "COUNT_LINES", "--model", model, "-q", "count"],
                                 cwd=tmp_path, capture_output=True, text=True, timeout=60)  # not installed here
        assert missing.returncode == 2 and message in missing.stderr, missing.stderr


def test_the_pyproject_docs_plugins_md_shows_builds_and_installs_a_working_plugin(tmp_path):
    docs = (REPO / "docs" / "plugins.md").read_text()
    [pyproject] = [block for block in re.findall(r"```toml\n(.*?)```", docs, flags=re.S) if "[build-system]" in block]
    source = tmp_path / "my-plugin"
    source.mkdir()
    (source / "pyproject.toml").write_text(pyproject)
    shutil.copy(REPO / "examples" / "plugin" / "anges_example_plugin.py", source)
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                           "--no-index", "--target", str(target), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    [entry_points] = target.glob("anges_example_plugin-0.1.0.dist-info/entry_points.txt")
    assert "[anges.plugins]\nexample = anges_example_plugin" in entry_points.read_text()
    (tmp_path / "notes.txt").write_text("a\nb\nc\n")
    run = subprocess.run([*ANGES, "--action", "COUNT_LINES", "--model", "lines:notes.txt", "-q", "count the notes"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "notes.txt has 3 lines."


def test_plugins_load_only_when_a_registry_is_asked_for_a_name_it_does_not_know(installed_plugin, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed_plugin)}
    help_run = subprocess.run([sys.executable, "-X", "importtime", "-m", "anges", "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip() for line in help_run.stderr.splitlines() if "|" in line}
    assert help_run.returncode == 0 and "anges.cli.main" in imported
    assert not imported & {"anges_example_plugin", "pluggy", "pydantic", "anges.registry"}
    probe = ("import sys, json\n"
             "from anges.agents import DefaultAgent\n"
             "from anges.models.scripted import ScriptedModel\n"
             "done = json.dumps({'reasoning': 'r', 'actions': [{'action_type': 'TASK_COMPLETE', 'content': 'ok'}]})\n"
             "agent = DefaultAgent(inference_func=ScriptedModel([done]), cmd_init_dir='.')\n"
             "agent.run_with_new_request('go')\n"
             "print(json.dumps([m in sys.modules for m in ('pluggy', 'anges_example_plugin')]))\n")
    builtin_run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=60)
    assert builtin_run.returncode == 0, builtin_run.stderr
    assert json.loads(builtin_run.stdout) == [False, False], "a run with built-in names only loaded the plug-ins"


def test_the_example_plugins_agent_type_offers_its_action_and_its_result_shows_like_a_builtins(installed_plugin,
                                                                                               tmp_path):
    (tmp_path / "notes.txt").write_text("a\nb\nc\n")
    env = {**os.environ, "PYTHONPATH": str(installed_plugin)}
    ran = subprocess.run([*ANGES, "--agent", "line_counter", "--model", "lines:notes.txt", "-q", "count the notes"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "notes.txt has 3 lines."  # no --action: the agent type offers COUNT_LINES
    [info] = EventStore().list()
    assert info.agent_type == "line_counter"
    for shown in (ran.stderr,  # the live transcript, then `anges show` and `anges show -v`
                  *(subprocess.run([*ANGES, "show", info.uid, *verbose], cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=60).stdout for verbose in ((), ("-v",)))):
        assert "COUNT_LINES counted the lines of notes.txt" in shown
        assert "│ COUNT_LINES notes.txt: 3 lines" in shown, shown  # the result, as a command's output shows


def test_a_plugin_agent_type_starts_from_a_packaged_template(plugin_on_path, tmp_path):
    model = ScriptedModel([complete()])
    agent_class("line_counter")(inference_func=model, cmd_init_dir=tmp_path).run_with_new_request("count")
    prompt = model.prompts[0]
    assert "You are a line counter" in prompt and "## COUNT_LINES" in prompt
    assert "Carry the task out to the end" in prompt  # the task executor's instructions, inherited
    assert "task executor" not in prompt.split("\n", 3)[0]  # its own role replaced the executor's
