"""What type checkers read for `anges`: the names `__init__.py` loads on first use, with their real types."""

from anges.actions import Action as Action
from anges.actions import ActionContext as ActionContext
from anges.actions import Param as Param
from anges.agents import BaseAgent as BaseAgent
from anges.agents import DefaultAgent as DefaultAgent
from anges.agents import TaskAnalyzer as TaskAnalyzer
from anges.agents import TaskExecutor as TaskExecutor
from anges.agents.orchestrator import Orchestrator as Orchestrator
from anges.config.loading import load_config as load_config
from anges.config.types import Config as Config
from anges.models import get_model as get_model
from anges.models.base import Completion as Completion
from anges.models.base import Model as Model
from anges.models.base import Usage as Usage
from anges.models.scripted import ScriptedModel as ScriptedModel
from anges.safety.approval import ApprovalRequest as ApprovalRequest
from anges.safety.approval import Decision as Decision
from anges.store.event_store import EventStore as EventStore
from anges.store.event_store import Store as Store
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES as RETURN_TO_PARENT_EVENT_TYPES
from anges.store.events import Event as Event
from anges.store.events import EventStream as EventStream
from anges.store.events import EventSummary as EventSummary

__version__: str
__all__: list[str]
