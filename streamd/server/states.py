"""Session states as data: an enum per protocol and the table of its allowed transitions (as h11 and
websockets write theirs).

A protocol session declares ``state = Transitions(...)`` on its class; every assignment to
``session.state`` is then checked against the table and a transition the table does not list raises
:class:`IllegalTransition` (a bug in the session, never a client's mistake: clients' mistakes are protocol
errors the session answers).  The state reads as its enum member; the members are also ``str`` with the
wire-era names (``"streaming"``), so logs, tests and older code comparing with strings keep working.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Generic, Iterable, Mapping, TypeVar

__all__ = ["SessionState", "Transitions", "IllegalTransition"]


class SessionState(str, Enum):
    """Base of the protocols' state enums: a member is its name on the wire and in logs."""

    def __str__(self) -> str:
        return self.value


S = TypeVar("S", bound=SessionState)


class IllegalTransition(RuntimeError):
    """A session tried a state change its transition table does not allow."""

    def __init__(self, machine: str, old: Any, new: Any, allowed: Iterable[Any]):
        names = ", ".join(sorted(str(s) for s in allowed)) or "none: it is final"
        super().__init__(f"{machine}: illegal state transition {str(old)!r} -> {str(new)!r} "
                         f"(allowed from {str(old)!r}: {names})")
        self.machine, self.old, self.new = machine, old, new


class Transitions(Generic[S]):
    """The allowed transitions of one protocol's session: ``table[state]`` = the states it may go to next.

    Every member of the enum must be a key (a final state maps to nothing).  Used as a class attribute
    (``state = Transitions(...)``) it is a data descriptor: an instance starts in ``initial`` and each
    assignment goes through :meth:`check`.
    """

    def __init__(self, machine: str, initial: S, table: Mapping[S, Iterable[S]]):
        self.machine = machine
        self.initial = initial
        self.states: type[S] = type(initial)
        self.table: dict[S, frozenset[S]] = {s: frozenset(table.get(s, ())) for s in self.states}
        missing = [str(s) for s in self.states if s not in table]
        stray = [t for targets in table.values() for t in targets if not isinstance(t, self.states)]
        if missing or stray or any(not isinstance(s, self.states) for s in table):
            raise ValueError(f"{machine}: the transition table must list every state of {self.states.__name__} "
                             f"once (missing: {missing}) and only its members (stray: {stray})")
        self._attr = "_state"

    def allowed(self, old: S) -> frozenset[S]:
        """The states ``old`` may go to."""
        return self.table[self.states(old)]

    def final(self) -> frozenset[S]:
        """The states nothing leaves."""
        return frozenset(s for s, nxt in self.table.items() if not nxt)

    def check(self, old: S, new: Any) -> S:
        """``new`` as a member when ``old`` -> ``new`` is allowed; IllegalTransition otherwise (an unknown
        state name too)."""
        old = self.states(old)
        try:
            target = self.states(new)
        except ValueError:
            raise IllegalTransition(self.machine, old, new, self.table[old]) from None
        if target not in self.table[old]:
            raise IllegalTransition(self.machine, old, target, self.table[old])
        return target

    # ------------------------------------------------------------------ descriptor

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self  # the class's table, e.g. V1Session.state.table
        return obj.__dict__.get(self._attr, self.initial)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self._attr] = self.check(obj.__dict__.get(self._attr, self.initial), value)
