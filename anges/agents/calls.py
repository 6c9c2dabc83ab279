"""An agent's model calls: on a thread of their own, so a stop ends the wait at once; provider errors as stops."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from anges.exceptions import ModelError, ModelReplyError, ModelSetupError, RunStopped
from anges.models.cancel import CallThread, CancelToken
from anges.waiting import wait_for

if TYPE_CHECKING:
    from anges.budget import Budget

class ModelCalls:
    """Runs an agent's model calls one at a time on its call thread, each under a cancel token.

    On a stop the provider drops its request and gives up retrying, and the thread is left to finish alone
    (a daemon: it cannot keep the process alive).
    """

    def __init__(self, name: str):
        self.name = name
        self._thread: CallThread | None = None

    def call(self, call: Callable[[], str], stop_requested: Callable[[], bool], check_limits: Callable[[], None],
             budget: Budget) -> str:
        """The reply of `call()`; RunStopped on a stop (`check_limits` says which) or a provider error."""
        try:
            return self._watch(call, stop_requested, check_limits)
        except ModelReplyError as exc:
            budget.charge(exc.usage, None)  # a refused reply still cost tokens
            raise
        except ModelSetupError as exc:  # a rejected key, an unknown model: retrying cannot help
            raise RunStopped("model_setup", f"the model is not usable: {exc}", error=str(exc)) from None
        except ModelError as exc:
            raise RunStopped("model_error", f"the model call failed: {exc}", error=str(exc)) from None

    def _watch(self, call: Callable[[], str], stop_requested: Callable[[], bool],
               check_limits: Callable[[], None]) -> str:
        token = CancelToken()
        pending = self._thread.start(call, token) if self._thread is not None else None
        if pending is None:  # no thread yet, or it ended while idle
            self._thread = CallThread(self.name)
            pending = self._thread.start(call, token)
        if wait_for(pending.wait, stop_requested) == "stopped":
            token.cancel()
            self._thread.close()
            self._thread = None
            check_limits()
            raise RunStopped("interrupt", "the run was interrupted")  # a stop that `check_limits` did not see
        return pending.result()
