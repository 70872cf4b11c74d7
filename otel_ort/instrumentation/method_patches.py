"""Replacing methods of ONNX Runtime's session classes with otel-ort's, and putting ORT's back.

A replacement is a plain function set on the class: the run path then costs one Python call
(a wrapt ``FunctionWrapper`` costs about 0.8 µs more per run, binding a method and a proxy
on every ``session.run`` lookup). Like wrapt's, it carries the original as ``__wrapped__``
(``inspect.signature`` and ``inspect.unwrap`` follow it) and its name and docstring.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import Any

Method = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Patch:
    """One method of one class, replaced."""

    cls: type
    name: str
    original: Any
    """What the class's ``__dict__`` held (put back by :func:`restore`)."""
    replacement: Method


def patch(cls: type, name: str, make: Callable[[Method], Method]) -> Patch | None:
    """Replace ``cls.name`` with ``make(original)``, where ``original`` is ORT's method taking
    the instance first; ``None`` if the class itself defines no such method (older ORT
    releases lack some)."""
    found = cls.__dict__.get(name)
    if found is None:
        return None
    # type(), not isinstance(): a proxy (wrapt's) passes itself off as the function it wraps
    replacement = make(found if type(found) is FunctionType else _unbound(found))
    functools.update_wrapper(replacement, found)
    setattr(cls, name, replacement)
    return Patch(cls, name, found, replacement)


def restore(patch: Patch) -> None:
    """Put ORT's method back, unless something replaced otel-ort's since: then otel-ort's stays
    in that chain (its wrappers only delegate once uninstrumented)."""
    if patch.cls.__dict__.get(patch.name) is patch.replacement:
        setattr(patch.cls, patch.name, patch.original)


def _unbound(descriptor: Any) -> Method:
    """A class attribute that is not a plain function (another library's wrapper, say), called
    the way attribute lookup on an instance would call it."""

    get = getattr(type(descriptor), "__get__", None)

    def call(instance: Any, *args: Any, **kwargs: Any) -> Any:
        bound = descriptor if get is None else get(descriptor, instance, type(instance))
        return bound(*args, **kwargs)

    return call
