"""Calls on ORT's ``RunOptions`` objects, recorded while instrumented.

A profiled run gets a copy of the caller's ``RunOptions`` (``profiled_call``), but ORT's
Python ``RunOptions`` cannot list its config entries or LoRA adapters. So while
instrumented, ``RunOptions.__init__``, ``add_run_config_entry`` and ``add_active_adapter``
note each call against their (weakly referenced) object; and setting
``RunOptions.terminate`` to True also sets it on the copies of runs in flight
(``following_terminate``), so that it ends a profiled run as it would have ended the run.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from otel_ort._util.forking import renew_locks_in_child
from otel_ort.failures import report_failure

Calls = list[tuple[str, tuple[Any, ...]]]

_RECORDED: weakref.WeakKeyDictionary[Any, Calls] = weakref.WeakKeyDictionary()
_recorded_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_recorded_lock")
_originals: dict[tuple[type, str], Any] = {}

RECORDED_METHODS = ("__init__", "add_run_config_entry", "add_active_adapter")
"""``RunOptions`` methods whose calls are recorded (``__init__`` marks an object made while
instrumented: its whole history is known)."""


def install_recorders(module: Any) -> None:
    """Record calls of ``RECORDED_METHODS`` on ORT's pybind ``RunOptions``, and forward its
    ``terminate`` to the copies following it.

    wrapt cannot be used here: ``getattr`` on a pybind class returns the bare builtin, and
    putting that back on ``uninstrument()`` would leave a method that no longer binds ``self``.
    The class's own ``__dict__`` entry is saved and restored instead.
    """
    cls = module.RunOptions
    for name in RECORDED_METHODS:
        if name in cls.__dict__ and (cls, name) not in _originals:
            _originals[cls, name] = cls.__dict__[name]
            setattr(cls, name, _recorder(name, getattr(cls, name)))
    terminate = cls.__dict__.get("terminate")
    if isinstance(terminate, property) and (cls, "terminate") not in _originals:
        _originals[cls, "terminate"] = terminate
        cls.terminate = _forwarding_terminate(terminate)


def uninstall_recorders() -> None:
    """Put ORT's methods back, and forget what was recorded: calls made on those options
    objects from now on are not seen, so their history is no longer whole."""
    while _originals:
        (cls, name), original = _originals.popitem()
        setattr(cls, name, original)
    with _recorded_lock:
        _RECORDED.clear()


def _recorder(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        try:
            with _recorded_lock:
                _RECORDED.setdefault(self, []).append((name, (*args, *kwargs.values())))
        except TypeError:  # an options object that cannot be weakly referenced: not recorded
            pass
        return result

    return record


_FOLLOWERS: dict[int, list[Any]] = {}
"""``id(RunOptions)`` → the copies of runs in flight with it (the caller holds it)."""


def following_terminate(run_options: Any, copy: Any) -> AbstractContextManager[None] | None:
    """Until the block ends (when the run has returned), ``run_options.terminate`` set to True,
    from any thread, sets it on ``copy`` too; ``None`` when ``run_options`` is ``None``: nothing
    to follow (the common case, on the request thread's path: no context manager to enter)."""
    return None if run_options is None else _following(run_options, copy)


@contextlib.contextmanager
def _following(run_options: Any, copy: Any) -> Iterator[None]:
    key = id(run_options)
    with _recorded_lock:
        _FOLLOWERS.setdefault(key, []).append(copy)
    try:
        if run_options.terminate:  # after registering: a flag set meanwhile is seen either way
            copy.terminate = True
        yield
    finally:
        with _recorded_lock:
            followers = _FOLLOWERS.get(key, [])
            followers.remove(copy)
            if not followers:
                del _FOLLOWERS[key]


def _forwarding_terminate(original: property) -> property:
    """``RunOptions.terminate`` that, set to True, also ends the profiled runs following it."""

    def set_terminate(self: Any, value: bool) -> None:
        original.__set__(self, value)
        if not value:
            return
        with _recorded_lock:
            followers = list(_FOLLOWERS.get(id(self), ()))
        for copy in followers:
            try:
                original.__set__(copy, True)
            except Exception:  # never the setter's caller's problem
                report_failure("could not end a profiled run")

    return property(original.__get__, set_terminate, doc=original.__doc__)


def recorded_calls(options: Any) -> Calls:
    """The recorded calls on ``options`` (a ``RunOptions``), in order."""
    if options is None:
        return []
    with _recorded_lock:
        try:
            return list(_RECORDED.get(options, ()))
        except TypeError:
            return []


def created_while_recording(calls: Calls) -> bool:
    """Whether these are the calls of an options object made while instrumented (its whole
    history is known)."""
    return bool(calls) and calls[0][0] == "__init__"
