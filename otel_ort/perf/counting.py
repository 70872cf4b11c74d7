"""Counting ORT's threads during profiled runs, for the profiling engine.

``PerfCounters`` is made at ``instrument()`` from the user's selection; ``prepare`` probes the
machine once (on the first selected run). Each profiled session gets a ``Pool`` of groups on
its intra-op threads; each thread that runs profiled runs gets a one-group pool of its own on
first use, kept in a thread-local (closed when the thread ends). Groups are opened once and
reused, and their software events count from then on into flight rings (``group.py``).

A profiled run (``begin`` … ``end``, on the request thread) only stamps its window on each of
its groups, just before ORT's run and just after: no system call, nothing switched on another
thread's CPU. Its records are taken afterwards (``settle``) by the worker as it converts the
run, cut to its window at once; a run whose records were written over meanwhile (a long
backlog) says so. Dense events (hardware counters) are the exception: their sampling would
cost every run, so each profiled run switches them on and off on its threads; a session's
pool then serves one profiled run at a time (concurrent profiled runs on one session take
turns), and a dense ring is emptied by each take, so a profiled run that starts before the
worker took the previous one's records takes them first.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from otel_ort.perf import probe
from otel_ort.perf.attribution import (
    Attribution,
    Counted,
    Read,
    ThreadRun,
    Windows,
    attribute,
    late_start,
    window_array,
)
from otel_ort.perf.events import TIME_ALIAS_DEFAULT, EventSelection, Unavailable
from otel_ort.perf.group import Taken, ThreadGroup
from otel_ort.perf.records import ThreadRecords, parse, parse_recent, trim_recent

_logger = logging.getLogger("otel_ort")


@dataclass(frozen=True, slots=True)
class ThreadRaw:
    """One thread's part of a counted run, once settled."""

    tid: int
    window: tuple[int, int]
    before: Read | None
    after: Read | None
    """The dense group's values at the start and the end (``None``: no dense events)."""
    taken: tuple[Taken, ...]
    """Its rings' records for the window (a flight ring's cut to them at once: whole rings
    would wait in memory for the conversion)."""
    incomplete: frozenset[str]
    """Rings whose records for the window are not all there (see ``ThreadRun``)."""
    ids: dict[str, int]
    dense_id: int | None
    running: bool
    """Whether it was on a CPU, if it never switched since its events were opened."""


Settled = tuple[tuple[ThreadRaw, ...], tuple[str, ...]]
"""A run's threads, and the threads it could not count (why)."""


_UNSETTLED = 64
"""Runs a pool lists for ``close`` at most."""


@dataclass(eq=False, slots=True)
class Share:
    """One run's part of a pool until it is settled: each group's dense values and time at
    the window's start, and its time at the end."""

    pool: Pool
    groups: list[ThreadGroup]
    started: list[tuple[Read | None, int]]
    stops: list[int] = field(default_factory=list)
    settled: Settled | None = None


@dataclass(eq=False)
class Pool:
    """Groups counted together: a session's intra-op threads, or one calling thread's group.
    ``problems`` name threads not counted."""

    groups: list[ThreadGroup]
    problems: list[str]
    calling: bool = False
    """One calling thread's own group: on a CPU whenever it starts a window."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by the run being counted."""
    _settling: threading.Lock = field(default_factory=threading.Lock)
    """Held by whoever takes a run's records: the worker, or (dense events) the pool's next
    profiled run."""
    _unsettled: deque[Share] = field(default_factory=lambda: deque(maxlen=_UNSETTLED))
    """Runs ended and not yet settled, the oldest dropped past ``_UNSETTLED`` (runs whose
    conversion never came: ORT raised, or the worker had no room): ``close`` settles them
    before the groups go. A request thread adds to it without a lock (a deque's append is
    one step); removing takes ``_settling``."""

    def window(self, stamp: int, skip: int | None = None) -> Share:
        """Request thread, software events only: a run's window starts at ``stamp`` on each
        group but ``skip``'s (counted by the calling thread's own pool). Nothing to switch."""
        groups = self.groups if skip is None else [g for g in self.groups if g.tid != skip]
        return Share(self, groups, [(None, stamp)] * len(groups))

    def ended(self, share: Share, stamp: int) -> None:
        """Request thread, software events only: ``share``'s window ends at ``stamp``."""
        share.stops = [stamp] * len(share.groups)
        self._unsettled.append(share)

    def start(self, skip: int | None = None) -> Share:
        """Request thread (holding ``lock``, for a session's pool), with dense events: a
        run's window starts on each group but ``skip``'s, switching its dense group on once
        the previous run's dense records and values are taken (back-to-back profiled runs of
        one session: then this run takes them, as the worker would)."""
        groups = self.groups if skip is None else [g for g in self.groups if g.tid != skip]
        self.settle_all()
        share = Share(self, groups, [])
        try:
            for group in groups:
                before = group.frozen or group.read()
                group.frozen = None  # its dense ring is empty: each stop is taken before a start
                share.started.append((before, group.start()))
        except BaseException:
            _disable(groups)
            raise
        return share

    def stop(self, share: Share) -> None:
        """Request thread, with dense events: the window ends, the dense groups are switched
        off (what it counted is settled later)."""
        try:
            share.stops = [group.stop() for group in share.groups]
        except BaseException:  # no group may be left counting
            _disable(share.groups)
            raise
        self._unsettled.append(share)

    def settle(self, share: Share) -> None:
        """Take ``share``'s ring bytes (and dense reads), unless that was done already; what
        cannot be read becomes one of its problems."""
        with self._settling:
            if share.settled is None:
                try:
                    share.settled = self._take(share)
                except Exception as exc:
                    share.settled = ((), (f"the run's counts could not be read: {exc!r}",))
                with contextlib.suppress(ValueError):  # not ended (an error path): not listed
                    self._unsettled.remove(share)

    def settle_all(self) -> None:
        """Settle every run ended and not settled yet."""
        with self._settling:
            waiting = self._unsettled.copy()  # one step, with or without the GIL
        for share in waiting:
            self.settle(share)

    def _take(self, share: Share) -> Settled:
        threads, problems = [], []
        for index, group in enumerate(share.groups):
            try:
                (before, start), stop = share.started[index], share.stops[index]
                group.frozen = after = group.read()  # it holds until enabled again
                # before the take: a switch after this shows in its records, which then say
                running = self.calling or (group.never_switched() and group.mostly_on_cpu())
                taken, incomplete = [], set()
                for ring in group.take(since=start):
                    kept, short = _for_window(ring, (start, stop))
                    taken.append(kept)
                    if short:
                        incomplete.add(ring.holds)
                        problems.append(
                            f"thread {group.tid}: the ring buffer of its {ring.holds} records "
                            f"{_LOSS[ring.since_open is None]}: what depends on them is not "
                            "given per node or in the run's totals"
                        )
            except (OSError, ValueError) as exc:  # closed meanwhile (shutdown gave up waiting)
                problems.append(f"thread {group.tid} not counted: {exc}")
                continue
            threads.append(
                ThreadRaw(
                    group.tid,
                    (start, stop),
                    before,
                    after,
                    tuple(taken),
                    frozenset(incomplete),
                    group.ids,
                    group.dense_id,
                    running,
                )
            )
        return tuple(threads), tuple(problems)

    def close(self, *, forked_child: bool = False) -> None:
        """Settle the runs not settled yet and close the groups, once no run uses them (in a
        forked child: at once, unsettled and without the lock, which a parent's thread may
        have held at the fork)."""
        with contextlib.nullcontext() if forked_child else self.lock:
            if not forked_child:
                self.settle_all()
            for group in self.groups:
                group.close(forked_child=forked_child)
            self.groups = []


@dataclass(slots=True)
class Counting:
    """A run being counted: the calling thread's share, then the session pool's."""

    own: Share
    pooled: Share


@dataclass(slots=True)
class RawRun:
    """A counted run, as the request thread leaves it: settled when the worker needs it."""

    shares: tuple[Share, ...]
    problems: tuple[str, ...]
    calling_tid: int | None = None
    """The thread that called ORT's run, when it entered each node (not with the parallel
    executor, whose nodes run on its inter-op threads)."""

    def settle(self) -> Settled:
        """Its threads' reads and ring bytes (taken now if nobody has yet)."""
        threads: list[ThreadRaw] = []
        problems = list(self.problems)
        for share in self.shares:
            if share.settled is None:
                share.pool.settle(share)
            settled, lost = share.settled or ((), ("a thread's counts were not settled",))
            threads += settled
            problems += lost
        return tuple(threads), tuple(problems)


@dataclass(frozen=True, slots=True)
class SettledRun:
    """A counted run's records and what attributing them takes: made by the worker, picklable
    (the conversion process attributes it)."""

    threads: tuple[ThreadRaw, ...]
    problems: tuple[str, ...]
    """The threads it could not count (why)."""
    calling_tid: int | None
    kinds: dict[str, str]
    """How each counted alias is attributed: the time alias first."""
    time_alias: str
    period_ns: int
    unavailable_events: tuple[str, ...]
    """One line per requested event that is never counted here."""

    def attribute(self, windows: Windows) -> RunCounts:
        """Per-node counts for ``windows`` (ns; the run's node windows, not overlapping),
        moved later if the calling thread's switch records show them early (``late_ns``)."""
        runs, throttled = [], 0
        for thread in self.threads:
            records = ThreadRecords()
            for taken in thread.taken:
                if taken.since_open is None:
                    parse(taken.data, thread.dense_id, records)
                else:
                    parse_recent(taken.data, thread.window, records)
            throttled += sum(
                thread.window[0] <= moment <= thread.window[1] for moment in records.throttles
            )
            runs.append(
                ThreadRun(
                    thread.tid,
                    thread.window,
                    thread.before,
                    thread.after,
                    records,
                    thread.ids,
                    thread.incomplete,
                    thread.running,
                )
            )
        calling = next((run for run in runs if run.tid == self.calling_tid), None)
        late = 0
        pairs = window_array(windows)
        if calling is not None:
            late = late_start(calling, pairs)
            pairs = pairs + late
        attribution = attribute(runs, pairs, Counted(self.kinds, self.time_alias))
        return RunCounts(attribution, self.period_ns, len(runs), throttled, self.problems, late)


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What the worker puts on spans and in the Chrome JSON."""

    attribution: Attribution
    period_ns: int
    threads: int
    throttled: int
    problems: tuple[str, ...]
    late_ns: int = 0
    """How much later than given the node windows were found to be (``late_start``): the
    counts are for the moved windows."""


_LOSS = {
    True: "filled up and later ones were dropped",
    False: "no longer held the start of the run (newer records took its place)",
}
_SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EBUSY})
"""Errors of perf_event_open (or its ring buffer's mmap) that say nothing of the machine."""


class PerfCounters:
    """perf counting for one ``instrument()``."""

    def __init__(self, selection: EventSelection, period_ns: int | None, explicit: bool) -> None:
        self._selection = selection
        self._period_ns = period_ns
        self._explicit = explicit  # the user named the events: warn about every one missing
        self._plan: probe.Plan | None = None
        self.unavailable = ""
        """Why nothing can be counted here, once known."""
        self._may_pass = False
        """``unavailable`` says of a shortage (file descriptors, memory): ``prepare`` retries."""
        self._time_alias = next(
            (spec.alias for spec in selection.events if spec.kind == "time"),
            TIME_ALIAS_DEFAULT,
        )
        self._calling = threading.local()
        self._groups: weakref.WeakSet[ThreadGroup] = weakref.WeakSet()
        """The calling threads' groups (a session's pool closes with the session)."""
        self._groups_lock = threading.Lock()
        self._running: set[int] = set()
        """Threads in a counted run: ``close`` leaves their groups to it (closed once freed)."""
        self._switched = False
        """Dense events are counted: each profiled run switches them on and off."""

    # -- worker ---------------------------------------------------------------------------

    def prepare(self, *, quiet: bool = False) -> bool:
        """Probe the machine (once; again after a shortage of file descriptors or memory);
        whether anything can be counted. Logs why an event (or perf itself) cannot count,
        once (a shortage, at each try): a warning for what the user named, else at INFO
        (``quiet``: the caller says it, from ``unavailable`` and ``unavailable_events``)."""
        if self._plan is not None or (self.unavailable and not self._may_pass):
            return self._plan is not None
        log = _logger.debug if quiet else _logger.warning if self._explicit else _logger.info
        try:
            self._plan = probe.make_plan(
                self._selection.events, self._selection.unavailable, self._period_ns
            )
            self._switched = any(spec.kind == "dense" for spec in self._plan.members)
        except (probe.PerfUnavailable, OSError) as exc:
            cause = exc.__cause__ if isinstance(exc, probe.PerfUnavailable) else exc
            self._may_pass = getattr(cause, "errno", None) in _SHORTAGES
            later = " (a shortage that may pass: tried again on a later profiled run)"
            self.unavailable = f"{exc}{later if self._may_pass else ''}"
            log("otel-ort: perf counters are off: %s", self.unavailable)
            return False
        self.unavailable = ""
        for line in self.unavailable_events:
            log("otel-ort: perf event not counted: %s", line)
        return True

    def pool(self, tids: Iterable[int]) -> Pool:
        """Groups on a session's threads, switched off (``prepare`` must have succeeded). A
        thread that has ended is left out: ORT's pool threads live as long as their session,
        so it was another library's, started while the session was made."""
        groups, problems = [], []
        for tid in tids:
            try:
                groups.append(self._group(tid))
            except OSError as exc:
                if exc.errno == errno.ESRCH:  # ended: not a live session's pool thread
                    _logger.debug("thread %d ended before its perf events were opened", tid)
                    continue
                problems.append(
                    f"thread {tid} not counted: {probe.event_problem('perf events', exc)}"
                )
        return Pool(groups, problems)

    def settled(self, raw: RawRun) -> SettledRun:
        """``raw`` settled, with what attributing it needs (``prepare`` must have succeeded)."""
        plan = self._plan
        assert plan is not None
        threads, lost = raw.settle()
        return SettledRun(
            threads,
            lost,
            raw.calling_tid,
            self._kinds(plan),
            self._time_alias,
            plan.period_ns,
            tuple(self.unavailable_events),
        )

    def _kinds(self, plan: probe.Plan) -> dict[str, str]:
        """How each counted alias is attributed: the time alias first."""
        kinds = {self._time_alias: "time"}
        kinds.update(
            (s.alias, "switches") for s in self._selection.events if probe.from_switch_records(s)
        )
        kinds.update((spec.alias, spec.kind) for spec in plan.members)
        return kinds

    @property
    def counted_aliases(self) -> list[str]:
        """The aliases counted here (none before ``prepare`` succeeds), the time alias first."""
        return list(self._kinds(self._plan)) if self._plan is not None else []

    @property
    def unavailable_events(self) -> list[str]:
        """One line per requested event that is not counted: its alias, name and why."""
        missing = self._plan.unavailable if self._plan is not None else ()
        return [_line(event) for event in missing]

    # -- request thread -------------------------------------------------------------------

    def begin(self, pool: Pool) -> Counting | str:
        """A run's window starts on this thread and ``pool``; with dense events, waiting for
        the pool's previous profiled run to end. Or say why this run is not counted (perf
        never makes a run fail)."""
        if self._plan is None:
            return self.unavailable or "perf counters are not ready yet"
        try:
            own = self._calling_pool()
        except OSError as exc:
            return f"this thread is not counted: {probe.event_problem('perf events', exc)}"
        tid = own.groups[0].tid
        if not self._switched:  # software events only: the window's time is all it takes
            stamp = time.time_ns()
            self._running.add(tid)
            return Counting(own.window(stamp), pool.window(stamp, skip=tid))
        pool.lock.acquire()
        try:
            pooled = pool.start(skip=own.groups[0].tid)
            try:
                counting = Counting(own.start(), pooled)  # the last, nearest to the run
                self._running.add(own.groups[0].tid)
                return counting
            except BaseException:
                pool.stop(pooled)
                raise
        except Exception as exc:
            pool.lock.release()
            return f"perf counting could not start: {exc!r}"
        except BaseException:
            pool.lock.release()
            raise

    def end(self, counting: Counting, *, caller_runs_nodes: bool) -> RawRun | str:
        """The window ends; what the worker needs, or why nothing can be used. Releases the
        pool (dense events). ``caller_runs_nodes``: the calling thread entered each node (sequential
        execution), so its switch records can place the run in time (``late_start``)."""
        own, pooled = counting.own, counting.pooled
        if not self._switched:
            stamp = time.time_ns()
            own.pool.ended(own, stamp)
            pooled.pool.ended(pooled, stamp)
            self._running.discard(own.groups[0].tid)
            calling = threading.get_native_id() if caller_runs_nodes else None
            return RawRun((own, pooled), tuple(pooled.pool.problems), calling)
        try:
            try:
                own.pool.stop(own)  # the first, nearest to the run
            finally:
                pooled.pool.stop(pooled)
        except Exception as exc:
            return f"perf counting could not stop: {exc!r}"
        finally:
            pooled.pool.lock.release()
            self._running.discard(own.groups[0].tid)
        calling = threading.get_native_id() if caller_runs_nodes else None
        return RawRun((own, pooled), tuple(pooled.pool.problems), calling)

    # -- groups ---------------------------------------------------------------------------

    def _calling_pool(self) -> Pool:
        """This thread's own pool: its group, counting from its first profiled run on."""
        pool: Pool | None = getattr(self._calling, "pool", None)
        if pool is None:
            group = self._group(threading.get_native_id())
            with self._groups_lock:
                self._groups.add(group)
            pool = self._calling.pool = Pool([group], [], calling=True)
        return pool

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
        return group

    def close(self, *, forked_child: bool = False) -> None:
        """Close every calling thread's group but those of runs in flight, whose fds the run
        still switches (they close when the run lets go of them); pools close with their
        twins."""
        with contextlib.nullcontext() if forked_child else self._groups_lock:
            groups = list(self._groups)
        for group in groups:
            if group.tid not in self._running:
                group.close(forked_child=forked_child)
        self._calling = threading.local()

    def after_fork_in_child(self) -> None:
        """The parent's threads do not exist here: drop their groups (closing our copies of
        the fds), theirs in a run too; the locks a parent's thread may have held go too."""
        self._running = set()
        self._groups_lock = threading.Lock()
        self.close(forked_child=True)


def _for_window(taken: Taken, window: tuple[int, int]) -> tuple[Taken, bool]:
    """``taken`` cut to what ``window`` needs (a flight ring's), and whether some of that is
    missing (a dense ring that filled up; a flight ring whose records no longer reach back
    before the window's start)."""
    if taken.since_open is None:
        return taken, taken.filled
    data, reached = trim_recent(taken.data, window)
    return replace(taken, data=data), not (reached or taken.since_open)


def _disable(groups: Iterable[ThreadGroup]) -> None:
    """Switch ``groups`` off and empty their rings, on an error path (no run takes what they
    recorded): each one, whatever the others do."""
    for group in groups:
        with contextlib.suppress(OSError):
            group.stop()
            group.discard()


def _line(event: Unavailable) -> str:
    return event.reason if event.alias == event.name else f"{event.alias} = {event.reason}"
