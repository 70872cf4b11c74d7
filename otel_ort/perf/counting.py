"""Counting ORT's threads during profiled runs, for the profiling engine.

``PerfCounters`` is made at ``instrument()`` from the user's selection; ``prepare`` probes the
machine once (on the first selected run). Each profiled session gets a ``Pool`` of groups on
its intra-op threads; each thread that runs profiled runs gets a one-group pool of its own on
first use, kept in a thread-local (closed when the thread ends). Groups are opened once and
reused. A profiled run (``begin`` … ``end``, on the request thread) switches the calling
thread's group and the session pool's groups on just before ORT's run and off just after:
the session's unprofiled runs pay nothing for switch records and samples. A session's pool
is used by one profiled run at a time: concurrent profiled runs on one session take turns
while perf counting is on. Switching another thread's events costs an interrupt to its CPU
(``task_function_call``), tens of microseconds per thread on a VM, even while it sleeps.

The request thread does no more than switch groups on and off: a run's reads and ring bytes
are taken afterwards (``settle``), by the worker as it converts the run, or by the pool's
next run if that starts first. A switched-off group holds its values and its rings stay as
they are, so they can wait.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

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
from otel_ort.perf.records import ThreadRecords, parse

_logger = logging.getLogger("otel_ort")

Reads = tuple[Read, Read | None]
"""A group's software and dense values (see ``ThreadGroup.read``)."""


@dataclass(frozen=True, slots=True)
class ThreadRaw:
    """One thread's part of a counted run, once settled."""

    tid: int
    window: tuple[int, int]
    before: Reads
    after: Reads
    taken: tuple[Taken, ...]
    ids: dict[str, int]
    dense_id: int | None


Settled = tuple[tuple[ThreadRaw, ...], tuple[str, ...]]
"""A run's threads, and the threads it could not count (why)."""


@dataclass(eq=False, slots=True)
class Share:
    """One run's part of a pool until it is settled; for a switched pool, each group's values
    and time when enabled, and its time when disabled."""

    pool: Pool
    groups: list[ThreadGroup]
    skip: int | None
    """A thread the calling thread's own pool counts: not counted twice."""
    started: list[tuple[Reads, int]] = field(default_factory=list)
    stops: list[int] = field(default_factory=list)
    settled: Settled | None = None


@dataclass(eq=False)
class Pool:
    """Groups counted together: a session's intra-op threads, or one calling thread's group.
    ``problems`` name threads not counted."""

    groups: list[ThreadGroup]
    problems: list[str]
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by the run being counted."""
    _settling: threading.Lock = field(default_factory=threading.Lock)
    _unsettled: Share | None = None

    def start(self, skip: int | None = None) -> Share:
        """Request thread (holding ``lock``, for a session's pool): begin a run's counting;
        first settle the previous run's if the worker has not yet (back-to-back profiled runs
        of one session: then this run reads the pool, as the worker would)."""
        self.settle()
        share = Share(self, [group for group in self.groups if group.tid != skip], None)
        try:
            for group in share.groups:
                before = group.frozen or group.read()
                group.frozen = None  # its rings are empty: each stop is taken before a start
                share.started.append((before, group.enable()))
        except BaseException:
            _disable(share.groups)
            raise
        return share

    def stop(self, share: Share) -> None:
        """Request thread: end ``share``'s counting (what it counted is settled later)."""
        try:
            share.stops = [group.disable() for group in share.groups]
        except BaseException:  # no group may be left counting
            _disable(share.groups)
            raise
        with self._settling:
            self._unsettled = share

    def settle(self) -> None:
        """Take the last stopped run's reads and ring bytes, unless that was done already;
        what cannot be read becomes one of its problems."""
        with self._settling:
            share, self._unsettled = self._unsettled, None
            if share is not None:
                try:
                    share.settled = self._take(share)
                except Exception as exc:
                    share.settled = ((), (f"the run's counts could not be read: {exc!r}",))

    def _take(self, share: Share) -> Settled:
        threads, problems = [], []
        for index, group in enumerate(share.groups):
            try:
                (before, start), stop = share.started[index], share.stops[index]
                group.frozen = after = group.read()  # it holds until enabled again
                taken = group.take()
            except (OSError, ValueError) as exc:  # closed meanwhile (shutdown gave up waiting)
                problems.append(f"thread {group.tid} not counted: {exc}")
                continue
            if group.tid != share.skip:
                threads.append(
                    ThreadRaw(
                        group.tid, (start, stop), before, after, taken, group.ids, group.dense_id
                    )
                )
        return tuple(threads), tuple(problems)

    def close(self, *, forked_child: bool = False) -> None:
        """Settle the last run and close the groups, once no run uses them (in a forked child:
        at once, unsettled and without the lock, which a parent's thread may have held at the
        fork)."""
        with contextlib.nullcontext() if forked_child else self.lock:
            if not forked_child:
                self.settle()
            for group in self.groups:
                group.close(forked_child=forked_child)
            self.groups = []


@dataclass(slots=True)
class Counting:
    """A run being counted: the calling thread's share, then the session pool's."""

    own: Share
    pooled: Share


@dataclass(frozen=True, slots=True)
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
                share.pool.settle()
            settled, lost = share.settled or ((), ("a thread's counts were not settled",))
            threads += settled
            problems += lost
        return tuple(threads), tuple(problems)


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

    def attribute(self, raw: RawRun, windows: Windows) -> RunCounts:
        """Per-node counts for ``windows`` (ns; the run's node windows, not overlapping),
        moved later if the calling thread's switch records show them early (``late_ns``)."""
        plan = self._plan
        assert plan is not None
        kinds = self._kinds(plan)
        threads, lost = raw.settle()
        runs, throttled, problems = [], 0, list(lost)
        for thread in threads:
            records = ThreadRecords()
            incomplete = set()
            for taken in thread.taken:
                parse(taken.data, thread.dense_id, records)
                if taken.filled:
                    incomplete.add(taken.holds)
                    exact = (  # context switches are counted from their records
                        "the run's totals are exact, but for context-switches"
                        if taken.holds == "switches"
                        else "the run's totals are exact"
                    )
                    problems.append(
                        f"thread {thread.tid}: the ring buffer of its {taken.holds} records "
                        "filled up and later ones were dropped: what depends on them is not "
                        f"given per node ({exact})"
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
        calling = next((run for run in runs if run.tid == raw.calling_tid), None)
        late = 0
        pairs = window_array(windows)
        if calling is not None:
            late = late_start(calling, calling.ids[self._time_alias], pairs)
            pairs = pairs + late
        attribution = attribute(runs, pairs, Counted(kinds, self._time_alias))
        return RunCounts(attribution, plan.period_ns, len(runs), throttled, tuple(problems), late)

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
        """Start counting this thread and ``pool`` (waiting for the pool's previous run to
        end); or say why this run is not counted (perf never makes a run fail)."""
        if self._plan is None:
            return self.unavailable or "perf counters are not ready yet"
        try:
            own = self._calling_pool()
        except OSError as exc:
            return f"this thread is not counted: {probe.event_problem('perf events', exc)}"
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
        """Stop counting; what the worker needs, or why nothing can be used. Releases the
        pool. ``caller_runs_nodes``: the calling thread entered each node (sequential
        execution), so its switch records can place the run in time (``late_start``)."""
        own, pooled = counting.own, counting.pooled
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
        """This thread's own pool: its group, switched on for its profiled runs."""
        pool: Pool | None = getattr(self._calling, "pool", None)
        if pool is None:
            group = self._group(threading.get_native_id())
            with self._groups_lock:
                self._groups.add(group)
            pool = self._calling.pool = Pool([group], [])
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


def _disable(groups: Iterable[ThreadGroup]) -> None:
    """Switch ``groups`` off and empty their rings, on an error path (no run takes what they
    recorded): each one, whatever the others do."""
    for group in groups:
        with contextlib.suppress(OSError):
            group.disable()
            group.discard()


def _line(event: Unavailable) -> str:
    return event.reason if event.alias == event.name else f"{event.alias} = {event.reason}"
