"""Calls on ORT's ``SessionOptions`` and ``RunOptions`` objects, recorded while instrumented.

ORT's Python options are write-only for config entries, free-dimension overrides and the
like; the twin of a session needs them, so while instrumented the methods in
``OPTION_RECORDERS`` note each call against its (weakly referenced) options object. Setting
``RunOptions.terminate`` also ends the twin runs that follow that object
(``following_terminate``), as it ends ORT's own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from otel_ort.capi import Termination
from otel_ort.failures import report_failure
from otel_ort.forking import renew_locks_in_child

_RECORDED: weakref.WeakKeyDictionary[Any, list[tuple[str, tuple[Any, ...]]]] = (
    weakref.WeakKeyDictionary()
)
_recorded_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_recorded_lock")
_originals: dict[tuple[type, str], Any] = {}

OPTION_RECORDERS = {
    "SessionOptions": (
        "__init__",  # marks the options made while instrumented: their whole history is known
        "add_session_config_entry",
        "add_free_dimension_override_by_name",
        "add_free_dimension_override_by_denotation",
        "add_initializer",
        "add_external_initializers",
        "add_external_initializers_from_files_in_memory",
        "register_custom_ops_library",
        "add_provider",
        "add_provider_for_devices",
        "set_provider_selection_policy",
        "set_provider_selection_policy_delegate",
    ),
    "RunOptions": ("__init__", "add_run_config_entry", "add_active_adapter"),
}
"""pybind class → methods whose calls are recorded for the twin."""


def install_recorders(module: Any) -> None:
    """Record calls of ``OPTION_RECORDERS`` methods on the classes of ORT's pybind ``module``,
    and forward ``RunOptions.terminate`` to the twin runs following it.

    wrapt cannot be used here: ``getattr`` on a pybind class returns the bare builtin, and
    putting that back on ``uninstrument()`` would leave a method that no longer binds ``self``.
    The class's own ``__dict__`` entry is saved and restored instead.
    """
    for class_name, methods in OPTION_RECORDERS.items():
        cls = getattr(module, class_name)
        for name in methods:
            if name in cls.__dict__ and (cls, name) not in _originals:
                _originals[cls, name] = cls.__dict__[name]
                setattr(cls, name, _recorder(name, getattr(cls, name)))
    cls = module.RunOptions
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


_FOLLOWERS: dict[int, list[Termination]] = {}
"""``id(RunOptions)`` → the terminations of twin runs in flight with it (the caller holds it)."""


@contextlib.contextmanager
def following_terminate(run_options: Any) -> Iterator[Termination | None]:
    """A ``Termination`` for a twin's run, requested when ``run_options.terminate`` is True
    now or set later, from any thread, until the block ends (when that run has returned);
    ``None`` without ``RunOptions``."""
    if run_options is None:
        yield None
        return
    termination, key = Termination(), id(run_options)
    with _recorded_lock:
        _FOLLOWERS.setdefault(key, []).append(termination)
    try:
        if run_options.terminate:  # after registering: a flag set meanwhile is seen either way
            termination.request()
        yield termination
    finally:
        with _recorded_lock:
            followers = _FOLLOWERS.get(key, [])
            followers.remove(termination)
            if not followers:
                del _FOLLOWERS[key]


def _forwarding_terminate(original: property) -> property:
    """``RunOptions.terminate`` that, set to True, also ends the twin runs following it."""

    def set_terminate(self: Any, value: bool) -> None:
        original.__set__(self, value)
        if not value:
            return
        with _recorded_lock:
            followers = list(_FOLLOWERS.get(id(self), ()))
        for termination in followers:
            try:
                termination.request()
            except Exception:  # never the setter's caller's problem
                report_failure("could not end a twin's run")

    return property(original.__get__, set_terminate, doc=original.__doc__)


def recorded_calls(options: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """The recorded calls on ``options`` (a ``SessionOptions`` or ``RunOptions``), in order."""
    if options is None:
        return []
    with _recorded_lock:
        try:
            return list(_RECORDED.get(options, ()))
        except TypeError:
            return []


Calls = list[tuple[str, tuple[Any, ...]]]
_SNAPSHOT_KEY = "_otel_ort_options_snapshot"
_MODEL_FILE_KEY = "_otel_ort_model_file"


def created_while_recording(calls: Calls) -> bool:
    """Whether these are the calls of an options object made while instrumented (its whole
    history is known)."""
    return bool(calls) and calls[0][0] == "__init__"


def snapshot_options(session: Any, init_kwargs: Mapping[str, Any]) -> None:
    """At the creation of an instrumented session: freeze the calls on its options (the user
    may change the options object afterwards, for another session), or why they are unknown;
    and note which file its model came from."""
    options = getattr(session, "_sess_options_initial", None)
    calls = recorded_calls(options)
    problem = ""
    if options is not None and not created_while_recording(calls):
        problem = (
            "its SessionOptions was created before instrument(), so its settings cannot be "
            "read; create options after instrument() to profile this session"
        )
    elif init_kwargs.get("disabled_optimizers"):
        problem = "it was created with disabled_optimizers"
    session.__dict__[_SNAPSHOT_KEY] = (calls, problem)
    path = getattr(session, "_model_path", None)
    if path:
        session.__dict__[_MODEL_FILE_KEY] = (os.path.abspath(path), _file_identity(path))


def model_file(session: Any) -> tuple[str, Callable[[], str]] | None:
    """For a session made from a file while instrumented: the absolute path it had then (a
    later ``chdir`` does not matter) and a check of why that file may no longer be the one
    the session read (a new export to the same path, say), ``""`` if none, to call before
    and after a twin loads it. ``None`` otherwise."""
    recorded = session.__dict__.get(_MODEL_FILE_KEY)
    if recorded is None:
        return None
    absolute, identity = recorded
    return absolute, functools.partial(_unchanged, absolute, identity)


def _unchanged(path: str, identity: tuple[int, ...] | None) -> str:
    if _file_identity(path) == identity:
        return ""
    return "its model file changed after the session was created: a twin would load the new model"


def _file_identity(path: Any) -> tuple[int, ...] | None:
    try:
        info = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    # ctime too: a rewrite that restores the size and mtime still moves it
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def session_calls(session: Any) -> tuple[Calls, str]:
    """The calls frozen at the session's creation, or why its options cannot be known."""
    snapshot: tuple[Calls, str] | None = session.__dict__.get(_SNAPSHOT_KEY)
    if snapshot is not None:
        return snapshot
    return [], (
        "it was created before instrument() (or while profiling was off), so the arguments "
        "it was created with cannot all be known (disabled_optimizers, for one: a twin with "
        "other optimizers may compute other numbers); create the session after instrument() "
        "to profile it"
    )
