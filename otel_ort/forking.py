"""Per-object repairs in a forked child (gunicorn and other pre-forking servers).

One hook registered with ``os.register_at_fork`` runs every living owner's repair, in the
order the owners registered; an owner that died is forgotten (the interpreter offers no way
to unregister a hook, so one hook per owner would outlive them all).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_repairs: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_repairs_lock = threading.Lock()


def after_fork_in_child(owner: T, repair: Callable[[T], None]) -> None:
    """Call ``repair(owner)`` in each child forked while ``owner`` lives (not kept alive for
    it): locks a parent's thread held at the fork stay held there, and threads are gone."""
    with _repairs_lock:
        _repairs[:] = [entry for entry in _repairs if entry[0]() is not None]
        _repairs.append((weakref.ref(owner), repair))


def renew_locks_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` new locks in its attributes ``names`` in each child forked while it lives."""

    def renew(alive: object) -> None:
        for name in names:
            setattr(alive, name, threading.Lock())

    after_fork_in_child(owner, renew)


def _repair_in_child() -> None:
    for reference, repair in list(_repairs):
        alive = reference()
        if alive is not None:
            try:
                repair(alive)
            except Exception:  # as register_at_fork does: say so, repair the others
                logging.getLogger("otel_ort").exception("repairing %r after fork failed", alive)


os.register_at_fork(after_in_child=_repair_in_child)
renew_locks_in_child(sys.modules[__name__], "_repairs_lock")  # held by a parent's thread?
