"""Which runs are profiled: profile samplers, and forcing the profile of the current run.

A profile sampler is asked once per run, on the request thread, after the run span started:
``should_profile(span_context)`` must be cheap and thread-safe. Independently of the
sampler, a run is profiled when forced, by :func:`profile_next_run` or by the baggage entry
``onnxruntime.profile=1`` (set by an upstream service, it travels with the trace).

``OTEL_ORT_PROFILE_SAMPLER`` spells a sampler as text; :func:`parse_sampler` reads it.
"""

from __future__ import annotations

import itertools
import math
import numbers
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from contextlib import ContextDecorator
from contextvars import ContextVar, Token

from opentelemetry.trace import SpanContext

from otel_ort._util.forking import after_fork_in_child, renew_locks_in_child

PROFILE_BAGGAGE_KEY = "onnxruntime.profile"
"""Baggage entry that forces the profile of every run in its trace when its value is ``1``."""


class ProfileSampler(ABC):
    """Decides whether a run is profiled."""

    @abstractmethod
    def should_profile(self, span_context: SpanContext) -> bool:
        """``span_context`` is the run span's; called once per run, from any thread."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Always(ProfileSampler):
    """Profile every run."""

    def should_profile(self, span_context: SpanContext) -> bool:
        return True


class Never(ProfileSampler):
    """Profile no run (forced runs still are); the default."""

    def should_profile(self, span_context: SpanContext) -> bool:
        return False


class Ratio(ProfileSampler):
    """Profile each run with probability ``p``, independently."""

    def __init__(self, p: float) -> None:
        _check_type(p, float, "Ratio(p): p")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Ratio(p): p must be between 0 and 1, got {p!r}")
        self.p = p

    def should_profile(self, span_context: SpanContext) -> bool:
        return _draw() < self.p

    def __repr__(self) -> str:
        return f"Ratio({self.p})"


class RateLimited(ProfileSampler):
    """At most ``per_second`` profiled runs per second on average, ``burst`` at once (a token
    bucket, full at the start)."""

    def __init__(self, per_second: float, burst: int = 1) -> None:
        _check_type(per_second, float, "RateLimited(per_second)")
        _check_type(burst, int, "RateLimited(burst=...)")
        if not (math.isfinite(per_second) and per_second > 0):
            raise ValueError(
                f"RateLimited(per_second): must be a finite number > 0, got {per_second!r}"
            )
        if not 1 <= burst <= _MAX_BURST:
            raise ValueError(f"RateLimited(burst=...): must be 1 to {_MAX_BURST}, got {burst!r}")
        self.per_second = per_second
        self.burst = int(burst)
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")

    def should_profile(self, span_context: SpanContext) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def __repr__(self) -> str:
        return f"RateLimited({self.per_second}, burst={self.burst})"


_MAX_BURST = 10**9
"""A larger bucket limits nothing (and its size must stay exact as a float)."""
_RANDOM = random.Random()
"""Ratio's own generator: drawing from ``random``'s would shift the user's seeded stream."""
_draw = _RANDOM.random

after_fork_in_child(_RANDOM, random.Random.seed)  # each child draws its own runs to profile


def _check_type(value: object, kind: type[int] | type[float], what: str) -> None:
    """``TypeError`` unless ``value`` is a whole number (numpy's too) or, for ``float``, a
    real number; a bool is not a number here."""
    kinds = numbers.Real if kind is float else numbers.Integral
    if isinstance(value, bool) or not isinstance(value, kinds):
        named = "a number" if kind is float else "a whole number (int)"
        raise TypeError(f"{what} must be {named}, got {value!r}")


class EveryNth(ProfileSampler):
    """Profile runs number ``skip_first + n``, ``skip_first + 2n``, ... (counted from 1, over
    all sessions of the process; forced runs are not asked, so not counted)."""

    def __init__(self, n: int, skip_first: int = 0) -> None:
        _check_type(n, int, "EveryNth(n): n")
        _check_type(skip_first, int, "EveryNth(skip_first=...)")
        if n < 1:
            raise ValueError(f"EveryNth(n): n must be >= 1, got {n!r}")
        if skip_first < 0:
            raise ValueError(f"EveryNth(skip_first=...): must be >= 0, got {skip_first!r}")
        self.n = int(n)
        self.skip_first = int(skip_first)
        self._count = itertools.count(1 - skip_first)  # next() is atomic under the GIL

    def should_profile(self, span_context: SpanContext) -> bool:
        number = next(self._count)
        return number > 0 and number % self.n == 0

    def __repr__(self) -> str:
        return f"EveryNth({self.n}, skip_first={self.skip_first})"


class ParentBased(ProfileSampler):
    """Ask ``inner`` only for runs whose trace is sampled: a profile of a run whose trace is
    not kept would have no spans to hang under."""

    def __init__(self, inner: ProfileSampler) -> None:
        if not isinstance(inner, ProfileSampler):
            raise TypeError(f"ParentBased(inner): inner must be a ProfileSampler, got {inner!r}")
        self.inner = inner

    def should_profile(self, span_context: SpanContext) -> bool:
        return span_context.trace_flags.sampled and self.inner.should_profile(span_context)

    def __repr__(self) -> str:
        return f"ParentBased({self.inner!r})"


_FORCED: ContextVar[list[bool] | None] = ContextVar("otel_ort_profile_next_run", default=None)
"""The request of the innermost ``profile_next_run`` block: one item until a run takes it. A
list, shared by the copies of the context made inside the block, so one run takes it."""


class profile_next_run(ContextDecorator):
    """Profile the next run started in this context, whatever the sampler: in this thread or
    task, or in a copy of its context made inside the block (``asyncio`` tasks,
    ``asyncio.to_thread``; an executor that does not copy the context does not see it).

    ``with otel_ort.profile_next_run(): session.run(...)``, or as a decorator of a plain
    function (not of an ``async def``: its block would end before the coroutine runs). Runs
    after the first one inside the block are left to the sampler. One object opens one block
    at a time (``RuntimeError`` otherwise). A class rather than a generator: its ``with``
    costs a profiled run's caller a few microseconds less.
    """

    _token: Token[list[bool] | None] | None = None

    def __enter__(self) -> None:
        if self._token is not None:
            raise RuntimeError(
                "this profile_next_run() block is already open: use a new profile_next_run() "
                "for each block"
            )
        self._token = _FORCED.set([True])

    def __exit__(self, *exc_info: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _FORCED.reset(token)

    def _recreate_cm(self) -> profile_next_run:  # each decorated call its own block
        return type(self)()


forced_request = _FORCED.get
"""The innermost ``profile_next_run`` block's request (falsy when there is none or a run took
it): a check that consumes nothing, before :func:`take_forced`."""


def take_forced() -> bool:
    """Whether :func:`profile_next_run` asks for this run; consumes the request."""
    request = _FORCED.get()
    if not request:
        return False
    try:
        request.pop()  # atomic: of two threads sharing the request, one takes it
    except IndexError:
        return False
    return True


_SPELLINGS = (
    "always, never, ratio:<p> (e.g. ratio:0.01), rate:<n>/s[,burst=<b>] (e.g. rate:2/s or "
    "rate:2/s,burst=5), every:<n>[,skip_first=<k>] (e.g. every:100 or "
    "every:100,skip_first=1000), each optionally as parentbased_<spelling>"
)
_RATE = re.compile(r"^rate:(?P<n>[^/]+)/s$")
_KINDS = ("always", "never", "ratio", "rate", "every")
_OPTIONS = {"rate": ("burst",), "every": ("skip_first",)}
"""The options each spelling takes after a comma (``name=<integer>``)."""


def parse_sampler(text: str) -> ProfileSampler:
    """A sampler from its text form (``OTEL_ORT_PROFILE_SAMPLER``); ``ValueError`` naming the
    valid spellings otherwise."""
    try:
        sampler = _parse(text.strip().lower())
    except ValueError as exc:
        raise ValueError(
            f"profile sampler {text!r}: {exc}; valid spellings: {_SPELLINGS}"
        ) from None
    if sampler is None:
        raise ValueError(f"unknown profile sampler {text!r}; valid spellings: {_SPELLINGS}")
    return sampler


def _parse(spelling: str) -> ProfileSampler | None:
    """The sampler ``spelling`` (stripped, lower case) names; ``None``: no sampler's."""
    if spelling.startswith("parentbased_"):
        inner = _parse(spelling.removeprefix("parentbased_"))
        return ParentBased(inner) if inner and not isinstance(inner, ParentBased) else None
    spelling, *extras = (part.strip() for part in spelling.split(","))
    kind = spelling.split(":")[0]
    options = _options(kind, extras) if kind in _KINDS else {}
    if spelling == "always":
        return Always()
    if spelling == "never":
        return Never()
    if spelling.startswith("ratio:"):
        return Ratio(float(spelling.removeprefix("ratio:")))
    if spelling.startswith("every:"):
        return EveryNth(int(spelling.removeprefix("every:")), **options)
    match = _RATE.match(spelling)
    return RateLimited(float(match["n"]), **options) if match else None


def _options(kind: str, extras: list[str]) -> dict[str, int]:
    """``name=<integer>`` options after the spelling, those ``kind`` takes only, each once."""
    allowed = _OPTIONS.get(kind, ())
    options = {}
    for extra in extras:
        name, equals, value = (part.strip() for part in extra.partition("="))
        if name in options:
            raise ValueError(f"{name} is given twice")
        if name not in allowed or not equals:
            takes = (
                f"takes {' and '.join(f'{a}=<integer>' for a in allowed)}"
                if allowed
                else "takes no options"
            )
            raise ValueError(f"{extra!r} is not an option it takes: {kind} {takes}")
        options[name] = int(value)
    return options
