"""The prompt around the history is rendered from the template once for each change of what it shows
(`Prompter._render`), not at every step: every prompt must still be what the template renders whole."""

import shutil

import jinja2

from anges.agents import DefaultAgent
from anges.config.loading import load_config, resource_path
from anges.models.replay import TOOK
from anges.models.scripted import ScriptedModel
from anges.prompt.templates import split_prompt


def reply(*actions):
    return {"analysis": "", "reasoning": "because", "actions": list(actions)}


def plan(*steps):
    return {"action_type": "UPDATE_PLAN", "plan": [{"step": step, "status": status} for step, status in steps]}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


SCRIPT = [
    reply(plan(("look", "in_progress"), ("write", "pending"))),
    reply(shell("echo one > a.txt")),
    "this is not the JSON object asked for",  # the next prompt's tail carries the feedback
    reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE b.txt", "content": "two\n"}),  # the edit reminder
    reply(plan(("look", "completed"), ("write", "in_progress"))),
    reply(shell("cat a.txt b.txt")),
    reply(shell("ls")),
    reply(shell("wc -l a.txt")),
    reply(shell("true")),
    reply({"action_type": "TASK_COMPLETE", "content": "done"}),
]


def prompts_of_a_run(work, config):
    model = ScriptedModel(list(SCRIPT))
    DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("write two files")
    for made in ("a.txt", "b.txt"):
        (work / made).unlink()
    # How long each command took differs between the two runs (under a minute, always six characters: `took`).
    return [(TOOK.sub("after … s", prompt), prompt.breaks, prompt.marks) for prompt in model.prompts]


def test_every_prompt_is_the_template_rendered_whole_as_plan_feedback_reminders_and_folds_change(
        work, tmp_path, monkeypatch):
    whole = tmp_path / "templates"  # the packaged templates as a template_dir of the user's: rendered every step
    shutil.copytree(resource_path("prompt_templates"), whole)
    overrides = {"agents": {"common": {"max_consecutive_actions_to_summarize": 4}}}
    rendered = []
    real_render = jinja2.Template.render
    monkeypatch.setattr(jinja2.Template, "render", lambda self, *a, **k: rendered.append(self.name) or real_render(
        self, *a, **k))

    framed = prompts_of_a_run(work, load_config(overrides=overrides))
    framed_renders = rendered.count("agents/default.j2")
    rendered.clear()
    expected = prompts_of_a_run(work, load_config(overrides={**overrides, "prompt": {"template_dir": str(whole)}}))

    assert len(framed) == len(expected) > len(SCRIPT), "a fold's prompt is among them"
    for number, (got, want) in enumerate(zip(framed, expected), 1):
        assert got == want, f"prompt {number} differs from the template rendered whole"
    assert "Plan updated" in framed[-1][0] and "## Your plan (1 of 2 done)" in framed[-1][0]
    assert any("You edited a file in your last step" in prompt for prompt, _, _ in framed)
    assert rendered.count("agents/default.j2") >= len(expected), "a template of the user's is rendered every time"
    tails = [split_prompt(prompt)[1] for prompt, _, _ in framed]
    changes = sum(tail != before for before, tail in zip(tails, tails[1:]))
    assert framed_renders <= 2 + changes < len(framed), "the packaged template is rendered when its tail changes"


def test_a_guide_or_a_note_changed_during_a_run_shows_in_the_next_prompt(work):
    model = ScriptedModel([reply({"action_type": "TASK_COMPLETE", "content": "done"})])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config())
    agent.run_with_new_request("go")
    before = agent.render_prompt()
    assert agent.render_prompt() == before

    shell_action = next(action for action in agent.registered_actions if action.type == "RUN_SHELL_CMD")
    shell_action.guide_prompt = "## RUN_SHELL_CMD\nA GUIDE REWRITTEN DURING THE RUN (an MCP server's tools dropped)"
    agent.notes.append("A NOTE ADDED DURING THE RUN")
    after = agent.render_prompt()
    assert "A GUIDE REWRITTEN DURING THE RUN" in after and "A NOTE ADDED DURING THE RUN" in after
    assert "A GUIDE REWRITTEN" not in before


def test_a_plug_ins_inline_template_is_rendered_at_every_step_as_it_may_read_anything(work):
    class Counting(DefaultAgent):
        template = "STEPS SO FAR: {{ agent.run_state.steps }}\n\n# History\n\n{{ history }}"

    model = ScriptedModel([reply(shell("true")), reply(shell("true")), reply({"action_type": "TASK_COMPLETE",
                                                                           "content": "done"})])
    Counting(inference_func=model, cmd_init_dir=work, config=load_config()).run_with_new_request("go")
    assert [prompt.splitlines()[0] for prompt in model.prompts] == [f"STEPS SO FAR: {n}" for n in range(3)]
