"""Per-object repairs in a forked child (gunicorn and other pre-forking servers).

One hook registered with ``os.register_at_fork`` runs every living owner's repair, in the
order the owners registered; an owner's repair is forgotten when the owner dies (the
interpreter offers no way to unregister a hook, so one hook per owner would outlive them
all). No lock: each step is one atomic operation under the GIL, so a finalizer that
registers a repair during garbage collection cannot deadlock.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_repairs: dict[int, tuple[weakref.ref[Any], Callable[[Any], None]]] = {}
"""Registration number → (owner, repair); in registration order."""
_numbers = itertools.count()


def after_fork_in_child(owner: T, repair: Callable[[T], None]) -> None:
    """Call ``repair(owner)`` in each child forked while ``owner`` lives (not kept alive for
    it): locks a parent's thread held at the fork stay held there, and threads are gone."""
    number = next(_numbers)

    def forget(_: object) -> None:
        _repairs.pop(number, None)

    _repairs[number] = (weakref.ref(owner, forget), repair)


def renew_locks_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` new locks in its attributes ``names`` in each child forked while it lives."""

    def renew(alive: object) -> None:
        for name in names:
            setattr(alive, name, threading.Lock())

    after_fork_in_child(owner, renew)


def _repair_in_child() -> None:
    for reference, repair in list(_repairs.values()):
        alive = reference()
        if alive is not None:
            try:
                repair(alive)
            except Exception:  # as register_at_fork does: say so, repair the others
                logging.getLogger("otel_ort").exception("repairing %r after fork failed", alive)


os.register_at_fork(after_in_child=_repair_in_child)
