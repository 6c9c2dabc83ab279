"""The fixed part of the prompt, per agent type: what every model call pays before the history.

Renders each agent type's first prompt (top-level, and as a child where it can be one) for a one-word request, in a
git repository, in two sessions: the default sandbox with a person to approve (every fact applies: the read-only
.git, `escalate`, loopback), and no sandbox with --approval auto. Prints the characters before `# History` and of
the whole first prompt. Run:
    python benchmarks/prompt_size.py
"""

import os
import subprocess
import tempfile

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import agent_class  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.scripted import ScriptedModel  # noqa: E402
from anges.safety.sandbox import availability  # noqa: E402

SESSIONS = {"sandbox, a person approves": ({}, lambda request: "allow"),
            "no sandbox, --approval auto": ({"sandbox": "off", "approval": "auto"}, None)}
KINDS = ("default", "task_executor", "task_analyzer", "orchestrator")


def first_prompt(kind: str, work: str, child: bool, safety: dict, approval) -> str:
    model = ScriptedModel([{"analysis": "", "reasoning": "", "actions": [{"action_type": "HELP_NEEDED",
                                                                           "content": "stop"}]}])
    agent = agent_class(kind)(parent_ids=["p" * 12] if child else None, inference_func=model, cmd_init_dir=work,
                              config=load_config(overrides={"safety": safety}), approval=approval)
    agent.run_with_new_request("hello")
    return model.prompts[0]


def main() -> None:
    if not availability("", (), quiet=True).ok:
        print("note: bwrap does not work here, so the first session runs without the sandbox too")
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["git", "init", "-q", work], check=True)
        print(f"{'agent type':<24} {'session':<28} {'fixed part':>10} {'first prompt':>13}")
        for kind in KINDS:
            for child in (False, True) if kind != "default" else (False,):
                for name, (safety, approval) in SESSIONS.items():
                    prompt = first_prompt(kind, work, child, safety, approval)
                    fixed = len(prompt.split("\n# History\n")[0])
                    label = f"{kind} (child)" if child else kind
                    print(f"{label:<24} {name:<28} {fixed:>10,} {len(prompt):>13,}")


if __name__ == "__main__":
    main()
