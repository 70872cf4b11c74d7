"""Counting ORT's threads during profiled runs, for the profiling engine.

``PerfCounters`` is made at ``instrument()`` from the user's selection; ``prepare`` probes the
machine once (off the request path). Each twin gets a ``Pool`` of groups on its intra-op
threads; each thread that runs profiled runs gets its own group on first use. Groups are
opened once and reused. During a profiled run (``begin`` … ``end``, on the request thread)
the run's groups are enabled; the worker then parses what they recorded and ``attribute``-s
it to the run's nodes. A twin's pool is used by one profiled run at a time: concurrent
profiled runs on one session take turns while perf counting is on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from otel_ort.perf import probe
from otel_ort.perf.attribution import Attribution, Counted, Read, ThreadRun, attribute
from otel_ort.perf.events import EventSelection, Unavailable
from otel_ort.perf.group import ThreadGroup
from otel_ort.perf.records import parse

_logger = logging.getLogger("otel_ort")


@dataclass(eq=False)
class Pool:
    """The groups on one twin's intra-op threads; ``problems`` name threads not counted."""

    groups: list[ThreadGroup]
    problems: list[str]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        for group in self.groups:
            group.close()
        self.groups = []


@dataclass(slots=True)
class Counting:
    groups: list[ThreadGroup]
    befores: list[Read]
    enabled_at: list[int]
    pool: Pool


@dataclass(frozen=True, slots=True)
class RawRun:
    """A counted run as the request thread leaves it: per thread, its window, reads, ring
    bytes and event ids (parsing waits for the worker)."""

    threads: tuple[tuple[int, tuple[int, int], Read, Read, bytes, bool, dict[str, int]], ...]
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What the worker puts on spans and in the Chrome JSON."""

    attribution: Attribution
    units: dict[str, str]
    period_ns: int
    threads: int
    lost: int
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
        self._calling: dict[int, ThreadGroup] = {}
        self._lock = threading.Lock()

    # -- worker ---------------------------------------------------------------------------

    def prepare(self) -> bool:
        """Probe the machine (once); whether anything can be counted. Logs one warning per
        requested event that cannot be counted, and one if perf is unusable."""
        if self._plan is not None or self.unavailable:
            return self._plan is not None
        try:
            self._plan = probe.make_plan(
                self._selection.events, self._selection.unavailable, self._period_ns
            )
        except (probe.PerfUnavailable, OSError) as exc:
            self.unavailable = str(exc)
            _logger.warning("otel-ort: perf counters are off: %s", exc)
            return False
        for line in self.unavailable_events:
            if self._explicit:
                _logger.warning("otel-ort: perf event not counted: %s", line)
            else:
                _logger.info("otel-ort: default perf event not counted: %s", line)
        return True

    def pool(self, tids: Iterable[int]) -> Pool:
        """Groups on a twin's threads (``prepare`` must have succeeded)."""
        groups, problems = [], []
        for tid in tids:
            try:
                groups.append(self._group(tid))
            except OSError as exc:
                problems.append(f"thread {tid} not counted: {probe.event_problem('group', exc)}")
        return Pool(groups, problems)

    def attribute(self, raw: RawRun, windows: Sequence[tuple[int, int]]) -> RunCounts:
        """Per-node counts for ``windows`` (ns; the run's node windows, not overlapping)."""
        plan = self._plan
        assert plan is not None
        kinds = {self._time_alias: "time"}
        units = {self._time_alias: "ns"}
        for spec in self._selection.events:
            if probe.from_switch_records(spec):
                kinds[spec.alias], units[spec.alias] = "switches", spec.unit
        for spec in plan.members:
            kinds[spec.alias], units[spec.alias] = spec.kind, spec.unit
        runs, lost, throttled, problems = [], 0, 0, list(raw.problems)
        for tid, window, before, after, data, filled, ids in raw.threads:
            records = parse(data, ids[self._time_alias])
            if filled:
                problems.append(
                    f"thread {tid}: its ring buffer filled up and later records were dropped: "
                    "its counts per node are incomplete (count fewer sparse events)"
                )
            lost += records.lost
            throttled += records.throttled
            runs.append(ThreadRun(tid, window, before, after, records, ids))
        attribution = attribute(runs, windows, Counted(kinds, self._time_alias))
        return RunCounts(
            attribution, units, plan.period_ns, len(runs), lost, throttled, tuple(problems)
        )

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
        tid = threading.get_native_id()
        try:
            group = self._calling_group(tid)
        except OSError as exc:
            return f"thread {tid} not counted: {probe.event_problem('group', exc)}"
        pool.lock.acquire()
        groups = [group, *pool.groups]
        try:
            befores = [g.read() for g in groups]
            return Counting(groups, befores, [g.enable() for g in groups], pool)
        except BaseException:
            pool.lock.release()
            raise

    def end(self, counting: Counting) -> RawRun:
        """Stop counting; what the worker needs. Releases the pool."""
        try:
            disabled_at = [g.disable() for g in counting.groups]
            threads = tuple(
                (g.tid, (start, stop), before, g.read(), *g.take(), dict(g.ids))
                for g, start, stop, before in zip(
                    counting.groups,
                    counting.enabled_at,
                    disabled_at,
                    counting.befores,
                    strict=True,
                )
            )
        finally:
            counting.pool.lock.release()
        return RawRun(threads, tuple(counting.pool.problems))

    # -- groups ---------------------------------------------------------------------------

    def _calling_group(self, tid: int) -> ThreadGroup:
        with self._lock:
            group = self._calling.get(tid)
            if group is None:
                for gone in [t for t, g in self._calling.items() if not g.alive()]:
                    self._calling.pop(gone).close()
                group = self._calling[tid] = self._group(tid)
            return group

    def _group(self, tid: int) -> ThreadGroup:
        plan = self._plan
        assert plan is not None
        return ThreadGroup(
            tid,
            self._time_alias,
            plan.members,
            period_ns=plan.period_ns,
            exclude_kernel=plan.exclude_kernel,
            pages=probe.RING_PAGES,
        )

    def close(self) -> None:
        """Close every calling thread's group (pools are closed with their twins)."""
        with self._lock:
            for group in self._calling.values():
                group.close()
            self._calling.clear()

    def after_fork_in_child(self) -> None:
        """The parent's threads do not exist here: drop their groups (closing our copies of
        the fds)."""
        self._lock = threading.Lock()
        self.close()


def _line(event: Unavailable) -> str:
    return event.reason if event.alias == event.name else f"{event.alias} = {event.reason}"
