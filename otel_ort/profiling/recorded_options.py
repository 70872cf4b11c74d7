"""Calls on ORT's ``SessionOptions`` and ``RunOptions`` objects, recorded while instrumented.

ORT's Python options are write-only for config entries, free-dimension overrides and the
like; the twin of a session needs them, so while instrumented the methods in
``OPTION_RECORDERS`` note each call against its (weakly referenced) options object.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

_RECORDED: weakref.WeakKeyDictionary[Any, list[tuple[str, tuple[Any, ...]]]] = (
    weakref.WeakKeyDictionary()
)
_recorded_lock = threading.Lock()
_originals: dict[tuple[type, str], Any] = {}

OPTION_RECORDERS = {
    "SessionOptions": (
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
    "RunOptions": ("add_run_config_entry", "add_active_adapter"),
}
"""pybind class → methods whose calls are recorded for the twin."""


def install_recorders(module: Any) -> None:
    """Record calls of ``OPTION_RECORDERS`` methods on the classes of ORT's pybind ``module``.

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


def uninstall_recorders() -> None:
    """Put ORT's methods back."""
    while _originals:
        (cls, name), original = _originals.popitem()
        setattr(cls, name, original)


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


def recorded_calls(options: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """The recorded calls on ``options`` (a ``SessionOptions`` or ``RunOptions``), in order."""
    if options is None:
        return []
    with _recorded_lock:
        try:
            return list(_RECORDED.get(options, ()))
        except TypeError:
            return []
