"""UPDATE_PLAN: the checklist an agent keeps of a task of several steps, which the user watches and the prompt's
tail shows the agent every turn."""

from __future__ import annotations

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.plans import STATUSES, Plan, PlanStep

MAX_STEPS = 30
STEP_CHARS = 300
ALIASES = {"done": "completed", "complete": "completed", "todo": "pending", "active": "in_progress"}


class UpdatePlan(Action):
    """Replaces the agent's plan with the list it is given."""

    type = "UPDATE_PLAN"
    guide_template = "actions/update_plan.j2"
    params = {"plan": Param(list, description='{"step": TEXT, "status": "pending"|"in_progress"|"completed"} items')}

    def may_change_files(self, args: dict) -> bool:
        return False

    def run(self, ctx: ActionContext, args: dict) -> Event:
        try:
            plan = read_plan(args["plan"])
        except ValueError as exc:
            return Event("action", content=f"{self.type} FAILED: {exc}. The plan was not changed.",
                         message=f"the plan was not changed: {exc}", data={"action_type": self.type, "error": str(exc)})
        return Event("plan_updated", content=f"Plan updated: {plan.progress()}.", message=f"plan: {plan.progress()}",
                     data={"action_type": self.type, "plan": plan.to_data()})


def read_plan(items: list) -> Plan:
    """The plan a model sent; ValueError saying what is wrong with it."""
    if len(items) > MAX_STEPS:
        raise ValueError(f"the plan has {len(items)} steps; keep it to {MAX_STEPS} at most")
    steps = []
    for number, item in enumerate(items, 1):
        text = item.get("step") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f'step {number} is not an object with a "step" text')
        if len(text) > STEP_CHARS:
            raise ValueError(f"step {number} is {len(text)} characters long; keep each step within {STEP_CHARS}")
        status = str(item.get("status") or "pending").strip().lower().replace(" ", "_").replace("-", "_")
        status = ALIASES.get(status, status)
        if status not in STATUSES:
            raise ValueError(f"step {number} has status {str(item.get('status'))[:40]!r}; use one of "
                             f"{', '.join(STATUSES)}")
        steps.append(PlanStep(" ".join(text.split()), status))
    return Plan(tuple(steps))
