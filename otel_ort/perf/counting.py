"""Counting ORT's threads during profiled runs, for the profiling engine.

``PerfCounters`` is made at ``instrument()`` from the user's selection; ``prepare`` probes the
machine once (off the request path). Each twin gets a ``Pool`` of groups on its intra-op
threads; each thread that runs profiled runs gets its own group on first use, kept in a
thread-local (closed when the thread ends). Groups are opened once and reused. During a
profiled run (``begin`` … ``end``, on the request thread) the calling thread's group is
enabled; the worker then parses what the run's groups recorded and ``attribute``-s it to the
run's nodes. A twin's pool is used by one profiled run at a time: concurrent profiled runs on
one session take turns while perf counting is on.

A pool whose threads work for profiled runs only (``stays_on``: the twin runs nothing else)
has its groups enabled once the twin is primed, until it closes; ``begin`` and ``end`` read
their values and rings instead of switching them. Switching another thread's events costs an
interrupt to its CPU (``task_function_call``), tens of microseconds per thread on a VM, even
while the thread sleeps; reading costs one only while the thread runs (spins). Each pool
thread's window is stamped next to its own reads, so a thread that runs between two reads is
not counted outside its window. A pool that also runs unprofiled runs (serve mode) is switched
on and off around each profiled run instead: those runs must not pay for switch records and
samples.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from otel_ort.perf import probe
from otel_ort.perf.attribution import Attribution, Counted, Read, ThreadRun, attribute
from otel_ort.perf.events import EventSelection, Unavailable
from otel_ort.perf.group import Taken, ThreadGroup
from otel_ort.perf.records import ThreadRecords, parse

_logger = logging.getLogger("otel_ort")


@dataclass(eq=False)
class Pool:
    """The groups on one twin's intra-op threads; ``problems`` name threads not counted."""

    groups: list[ThreadGroup]
    problems: list[str]
    stays_on: bool
    """The groups are enabled for the pool's life (else only during profiled runs)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self, *, forked_child: bool = False) -> None:
        """Close the groups once no run uses them (in a forked child: at once, without the
        lock, which a parent's thread may have held at the fork)."""
        with contextlib.nullcontext() if forked_child else self.lock:
            for group in self.groups:
                group.close()
            self.groups = []


@dataclass(slots=True)
class Counting:
    """A run being counted: the calling thread's group, then the pool's; their reads at the
    start, and when each one's counting window starts."""

    groups: list[ThreadGroup]
    befores: list[tuple[Read, Read | None]]
    started_at: list[int]
    pool: Pool


@dataclass(frozen=True, slots=True)
class ThreadRaw:
    """One thread's part of a counted run, as the request thread leaves it."""

    tid: int
    window: tuple[int, int]
    before: tuple[Read, Read | None]
    after: tuple[Read, Read | None]
    taken: tuple[Taken, ...]
    ids: dict[str, int]
    dense_id: int | None


@dataclass(frozen=True, slots=True)
class RawRun:
    """A counted run before parsing (which waits for the worker)."""

    threads: tuple[ThreadRaw, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What the worker puts on spans and in the Chrome JSON."""

    attribution: Attribution
    period_ns: int
    threads: int
    throttled: int
    problems: tuple[str, ...]


class PerfCounters:
    """perf counting for one ``instrument()``."""

    def __init__(self, selection: EventSelection, period_ns: int | None, explicit: bool) -> None:
        self._selection = selection
        self._period_ns = period_ns
        self._explicit = explicit  # the user named the events: warn about every one missing
        self._plan: probe.Plan | None = None
        self.unavailable = ""
        """Why nothing can be counted here, once known."""
        self._time_alias = next(
            (spec.alias for spec in selection.events if spec.kind == "time"),
            probe.TIME_ALIAS_DEFAULT,
        )
        self._calling = threading.local()
        self._groups: weakref.WeakSet[ThreadGroup] = weakref.WeakSet()

    # -- worker ---------------------------------------------------------------------------

    def prepare(self) -> bool:
        """Probe the machine (once); whether anything can be counted. Says once why an event
        (or perf itself) cannot count: a warning for what the user named, else at INFO."""
        if self._plan is not None or self.unavailable:
            return self._plan is not None
        log = _logger.warning if self._explicit else _logger.info
        try:
            self._plan = probe.make_plan(
                self._selection.events, self._selection.unavailable, self._period_ns
            )
        except (probe.PerfUnavailable, OSError) as exc:
            self.unavailable = str(exc)
            log("otel-ort: perf counters are off: %s", exc)
            return False
        for line in self.unavailable_events:
            log("otel-ort: perf event not counted: %s", line)
        return True

    def pool(self, tids: Iterable[int], *, stays_on: bool) -> Pool:
        """Groups on a twin's threads, enabled if they are to stay on (``prepare`` must have
        succeeded)."""
        groups, problems = [], []
        for tid in tids:
            try:
                group = self._group(tid)
                if stays_on:
                    group.enable()
                groups.append(group)
            except OSError as exc:
                problems.append(f"thread {tid} not counted: {probe.event_problem('group', exc)}")
        return Pool(groups, problems, stays_on)

    def attribute(self, raw: RawRun, windows: Sequence[tuple[int, int]]) -> RunCounts:
        """Per-node counts for ``windows`` (ns; the run's node windows, not overlapping)."""
        plan = self._plan
        assert plan is not None
        kinds = {self._time_alias: "time"}
        kinds.update(
            (s.alias, "switches") for s in self._selection.events if probe.from_switch_records(s)
        )
        kinds.update((spec.alias, spec.kind) for spec in plan.members)
        runs, throttled, problems = [], 0, list(raw.problems)
        for thread in raw.threads:
            records = ThreadRecords()
            incomplete = set()
            for taken in thread.taken:
                parse(taken.data, thread.dense_id, records)
                if taken.filled:
                    incomplete.add(taken.holds)
                    problems.append(
                        f"thread {thread.tid}: the ring buffer of its {taken.holds} records "
                        "filled up and later ones were dropped: what depends on them is not "
                        "given per node (the run's totals are exact)"
                    )
            throttled += records.throttled
            (before, dense_before), (after, dense_after) = thread.before, thread.after
            runs.append(
                ThreadRun(
                    thread.tid,
                    thread.window,
                    before,
                    after,
                    dense_before,
                    dense_after,
                    records,
                    thread.ids,
                    frozenset(incomplete),
                )
            )
        attribution = attribute(runs, windows, Counted(kinds, self._time_alias))
        return RunCounts(attribution, plan.period_ns, len(runs), throttled, tuple(problems))

    @property
    def unavailable_events(self) -> list[str]:
        """One line per requested event that is not counted: its alias, name and why."""
        missing = self._plan.unavailable if self._plan is not None else ()
        return [_line(event) for event in missing]

    # -- request thread -------------------------------------------------------------------

    def begin(self, pool: Pool) -> Counting | str:
        """Start counting this thread and ``pool`` (waiting for the pool's previous run to
        end); or say why this run is not counted."""
        if self._plan is None:
            return self.unavailable or "perf counters are not ready yet"
        try:
            group = self._calling_group()
        except OSError as exc:
            return f"this thread is not counted: {probe.event_problem('group', exc)}"
        pool.lock.acquire()
        pooled = [g for g in pool.groups if g.tid != group.tid]
        try:
            started = [_start(g, switched=not pool.stays_on) for g in pooled]
            started.insert(0, _start(group, switched=True))  # the last, nearest to the run
        except BaseException:
            _disable([group] if pool.stays_on else [group, *pooled])
            pool.lock.release()
            raise
        befores, starts = zip(*started, strict=True)
        return Counting([group, *pooled], list(befores), list(starts), pool)

    def end(self, counting: Counting) -> RawRun:
        """Stop counting; what the worker needs. Releases the pool."""
        group, *pooled = counting.groups
        stays_on = counting.pool.stays_on
        try:
            try:
                stopped = [_stop(group, switched=True)]
                stopped += [_stop(g, switched=not stays_on) for g in pooled]
            except BaseException:  # no group may be left counting
                _disable([group] if stays_on else counting.groups)
                raise
            threads = tuple(
                ThreadRaw(g.tid, (start, stop), before, after, g.take(), g.ids, g.dense_id)
                for g, start, before, (after, stop) in zip(
                    counting.groups, counting.started_at, counting.befores, stopped, strict=True
                )
            )
        finally:
            counting.pool.lock.release()
        return RawRun(threads, tuple(counting.pool.problems))

    # -- groups ---------------------------------------------------------------------------

    def _calling_group(self) -> ThreadGroup:
        group: ThreadGroup | None = getattr(self._calling, "group", None)
        if group is None:
            group = self._calling.group = self._group(threading.get_native_id())
        return group

    def _group(self, tid: int) -> ThreadGroup:
        plan = self._plan
        assert plan is not None
        group = ThreadGroup(
            tid,
            self._time_alias,
            plan.members,
            period_ns=plan.period_ns,
            exclude_kernel=plan.exclude_kernel,
            pages=probe.RING_PAGES,
        )
        self._groups.add(group)
        return group

    def close(self) -> None:
        """Close every calling thread's group (pools are closed with their twins)."""
        for group in list(self._groups):
            group.close()
        self._calling = threading.local()

    def after_fork_in_child(self) -> None:
        """The parent's threads do not exist here: drop their groups (closing our copies of
        the fds)."""
        self.close()


def _start(group: ThreadGroup, *, switched: bool) -> tuple[tuple[Read, Read | None], int]:
    """A group's values at a run's start, and when its window starts. A ``switched`` group is
    enabled (its values, read when it was last disabled, held since); one that stays on is
    read, what its rings hold dropped."""
    if switched:
        before = group.frozen or group.read()
        group.frozen = None
        group.discard()  # nothing, unless a record came in as it was switched off
        return before, group.enable()
    group.discard()  # what it recorded since the last run: not this run's
    started = time.time_ns()
    return group.read(), started


def _stop(group: ThreadGroup, *, switched: bool) -> tuple[tuple[Read, Read | None], int]:
    """A group's values at a run's end, and when its window ends (see ``_start``)."""
    if switched:
        stopped = group.disable()
        group.frozen = group.read()
        return group.frozen, stopped
    after = group.read()
    return after, time.time_ns()


def _disable(groups: Iterable[ThreadGroup]) -> None:
    """Switch ``groups`` off, on an error path: each one, whatever the others do."""
    for group in groups:
        with contextlib.suppress(OSError):
            group.disable()


def _line(event: Unavailable) -> str:
    return event.reason if event.alias == event.name else f"{event.alias} = {event.reason}"
