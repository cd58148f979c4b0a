"""One call into a shard's state machine and what it produces: records, answers, undo hooks, events.

The shard (coordinator.shard) and its managers share one `Calls`: a handler of any of them appends to
`calls.fx` (the `Effects` of the call that is running) and never returns records or answers by hand. A method
marked `@state_machine_call` is an entry point: it opens a call, runs, and turns what the call produced into a
`CoordinatorResult`. Calls do not nest (an entry point that calls another raises), so "one request, one result"
holds by construction.

What a handler applies to memory before its records are durable (GroupMetadata, GroupPause, GroupSettings) is
counted in `unreplayed` until the runtime replays those records, so their replay can be skipped (see
coordinator.shard); when the append fails instead, the result's `on_append_failure` runs the call's undo hooks
and answers every token of the result with the error, in a call of its own.

Events (coordinator.group.events) go to the listeners synchronously, inside the call that caused them, with the
state machine's clock in their timestamps.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from coordinator.records import CoordinatorRecord, applied_in_memory
from coordinator.result import CoordinatorResult
from protocol.errors import ErrorCode

from .events import GroupEvent, GroupEventListener

log = logging.getLogger(__name__)

FailureHook = Callable[[ErrorCode], dict[object, Any]]
"""Undo in-memory changes of a result whose append failed; returns replacement answers by token."""


@dataclasses.dataclass(slots=True)
class Effects:
    """What one call into the state machine produces."""

    records: list[CoordinatorRecord] = dataclasses.field(default_factory=list)
    responses: list[tuple[object, Any]] = dataclasses.field(default_factory=list)
    failure_hooks: list[FailureHook] = dataclasses.field(default_factory=list)
    own_token: object = None
    own_error: Callable[[ErrorCode], Any] | None = None  # the request's own answer when its write fails


class Calls:
    """The call into a shard's state machine that is running (if any), the records applied in memory and not
    yet replayed, and the event listeners."""

    def __init__(self) -> None:
        self.effects: Effects | None = None
        self.unreplayed: collections.Counter[CoordinatorRecord] = collections.Counter()
        self.listeners: list[GroupEventListener] = []

    @property
    def fx(self) -> Effects:
        assert self.effects is not None, "called outside of a state machine call"
        return self.effects

    def respond(self, token: object, response: Any) -> None:
        self.fx.responses.append((token, response))

    def emit(self, event: GroupEvent) -> None:
        for listener in self.listeners:
            try:
                listener.on_group_event(event)
            except Exception:
                log.exception("group event listener %r failed on %r", listener, event)

    def run(self, method: Callable[..., None], *args: Any, **kwargs: Any) -> CoordinatorResult:
        """`method(*args, **kwargs)` as one call; what it produced, as a result."""
        if self.effects is not None:
            raise RuntimeError("the group coordinator is not re-entrant")
        self.effects = effects = Effects()
        try:
            method(*args, **kwargs)
        finally:
            self.effects = None
        return self._to_result(effects)

    def op(self, method: Callable[..., None], *args: Any) -> Callable[[], CoordinatorResult]:
        """A timer operation: `method(*args)` as its own call."""
        return functools.partial(self.run, method, *args)

    def replayed(self, record: CoordinatorRecord) -> bool:
        """True (and forgotten) if `record` was applied in memory by the handler that wrote it."""
        if self.unreplayed[record] > 0:
            self.unreplayed[record] -= 1
            if not self.unreplayed[record]:
                del self.unreplayed[record]
            return True
        return False

    def _to_result(self, effects: Effects) -> CoordinatorResult:
        result = CoordinatorResult(records=effects.records, responses=effects.responses)
        if effects.records:
            # Records that describe what memory already holds: their replay is skipped. Counted until
            # replayed, or forgotten if the append fails.
            written = [r for r in effects.records if applied_in_memory(r)]
            self.unreplayed.update(written)
            result.on_append_failure = functools.partial(
                self.run,
                self._append_failed,
                written,
                list(effects.responses),
                list(effects.failure_hooks),
                effects.own_token,
                effects.own_error,
            )
        return result

    def _append_failed(
        self,
        written: list[CoordinatorRecord],
        original: list[tuple[object, Any]],
        hooks: list[FailureHook],
        own_token: object,
        own_error: Callable[[ErrorCode], Any] | None,
        error_code: int,
    ) -> None:
        self.unreplayed.subtract(written)
        self.unreplayed = +self.unreplayed  # drop counts that reached zero
        error = ErrorCode(error_code)
        replaced: dict[object, Any] = {}
        for hook in hooks:
            replaced.update(hook(error))
        if own_error is not None and own_token not in replaced and any(t is own_token for t, _ in original):
            replaced[own_token] = own_error(error)
        later = self.fx.responses
        self.fx.responses = [(token, replaced.get(token, response)) for token, response in original] + later


class HasCalls(Protocol):
    calls: Calls


P = ParamSpec("P")
S = TypeVar("S", bound=HasCalls)


def state_machine_call(
    method: Callable[Concatenate[S, P], None],
) -> Callable[Concatenate[S, P], CoordinatorResult]:
    """Mark a method of an object with `.calls` as an entry point: one call into the state machine."""

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> CoordinatorResult:
        return self.calls.run(method, self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]  # functools.wraps hides the new return type from mypy
