"""Per-object repairs in a forked child (gunicorn and other pre-forking servers)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def after_fork_in_child(owner: T, repair: Callable[[T], None]) -> None:
    """Call ``repair(owner)`` in each child forked while ``owner`` lives (not kept alive for
    it): locks a parent's thread held at the fork stay held there, and threads are gone."""
    reference = weakref.ref(owner)

    def in_child() -> None:
        alive = reference()
        if alive is not None:
            repair(alive)

    os.register_at_fork(after_in_child=in_child)


def renew_locks_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` new locks in its attributes ``names`` in each child forked while it lives."""

    def renew(alive: object) -> None:
        for name in names:
            setattr(alive, name, threading.Lock())

    after_fork_in_child(owner, renew)
