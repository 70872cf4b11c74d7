"""What this machine lets otel-ort count, checked once on the calling thread.

- whether perf_event_open works at all, and whether kernel-mode counting is allowed
  (``kernel.perf_event_paranoid`` >= 2 without CAP_PERFMON needs ``exclude_kernel``);
- which requested events open, and why not for the others;
- the cost of one leader sample, from which the default sampling period is chosen.
"""

from __future__ import annotations

import errno
import threading
import time
from dataclasses import dataclass

import numpy as np

from otel_ort.perf import kernel
from otel_ort.perf.events import EventSpec, Unavailable
from otel_ort.perf.group import ThreadGroup
from otel_ort.perf.records import ThreadRecords, parse

RING_PAGES = 64
"""Data pages per thread (256 KiB with 4 KiB pages): about 8,000 records per run."""
_SAMPLE_BUDGET = 0.01
"""Target share of CPU time spent taking samples, for the default period."""
_PERIOD_BOUNDS_NS = (1_000_000, 10_000_000)
_KERNEL_MODE_EVENTS = {(kernel.TYPE_SOFTWARE, 4)}
"""cpu-migrations: counted from kernel context, so ``exclude_kernel`` leaves it at 0."""


class PerfUnavailable(Exception):
    """perf cannot count anything here; the message says why and what to change."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How every thread's group is opened."""

    members: tuple[EventSpec, ...]
    unavailable: tuple[Unavailable, ...]
    exclude_kernel: bool
    period_ns: int
    """Leader sampling period; 0 when no dense event is counted (none is needed)."""
    sample_cost_ns: float | None


def make_plan(
    events: tuple[EventSpec, ...], unavailable: tuple[Unavailable, ...], period_ns: int | None
) -> Plan:
    """Probe ``events`` on this thread; ``period_ns`` ``None`` picks the default period."""
    tid = threading.get_native_id()
    exclude_kernel = _needs_exclude_kernel(tid)
    members: list[EventSpec] = []
    problems = list(unavailable)
    for spec in events:
        if spec.kind == "time" or from_switch_records(spec):
            continue
        if exclude_kernel and (spec.type, spec.config) in _KERNEL_MODE_EVENTS:
            problems.append(
                Unavailable(
                    spec.name,
                    spec.alias,
                    f"{spec.name} is counted in kernel mode, which this process may not count "
                    "(kernel.perf_event_paranoid >= 2 without CAP_PERFMON)",
                )
            )
            continue
        dense = [m for m in members if m.kind == "dense"] if spec.kind == "dense" else []
        problem = _open_problem(tid, (*dense, spec), exclude_kernel)
        if problem and dense and not _open_problem(tid, (spec,), exclude_kernel):
            together = ", ".join(m.name for m in dense)
            problem = (
                f"{spec.name}: does not fit in one group with {together} (the PMU has too few "
                "counters for all of them at once); ask for fewer hardware events"
            )
        if problem:
            problems.append(Unavailable(spec.name, spec.alias, problem))
        else:
            members.append(spec)
    sampled = any(spec.kind == "dense" for spec in members)
    cost = _sample_cost_ns(tid, exclude_kernel) if sampled and period_ns is None else None
    if not sampled:
        period = 0
    elif period_ns is not None:
        period = period_ns
    else:
        assert cost is not None
        low, high = _PERIOD_BOUNDS_NS
        period = int(min(max(cost / _SAMPLE_BUDGET, low), high))
    return Plan(tuple(members), tuple(problems), exclude_kernel, period, cost)


def _open_problem(tid: int, specs: tuple[EventSpec, ...], exclude_kernel: bool) -> str:
    """Why ``specs`` cannot be opened together on thread ``tid`` ("" if they can)."""
    try:
        ThreadGroup(
            tid, "probe", specs, period_ns=0, exclude_kernel=exclude_kernel, pages=1
        ).close()
    except OSError as exc:
        return event_problem(specs[-1].name, exc)
    return ""


def from_switch_records(spec: EventSpec) -> bool:
    """Context switches are counted from the leader's switch records: exact, and kernel-mode
    counting (which ``exclude_kernel`` forbids) is not needed."""
    return (spec.type, spec.config) == (kernel.TYPE_SOFTWARE, 3)


def event_problem(name: str, exc: OSError) -> str:
    """Why ``name`` cannot be counted, from perf_event_open's errno, with what to change."""
    code = exc.errno
    if isinstance(exc, kernel.RingError):
        return (
            f"{name}: its ring buffer could not be mapped ({exc.strerror}): the locked memory "
            "allowed for perf buffers is used up; raise `sysctl kernel.perf_event_mlock_kb` or "
            "`ulimit -l`, or give the process CAP_IPC_LOCK"
        )
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"{name}: permission denied ({exc.strerror}); allow it with "
            "`sysctl kernel.perf_event_paranoid=2` (or lower) or give the process CAP_PERFMON; "
            "in a container, the seccomp profile must allow perf_event_open"
        )
    why = _ERRNO_REASONS.get(code or 0, "")
    return f"{name}: {why} ({exc.strerror})" if why else f"{name}: {exc.strerror or exc}"


_ERRNO_REASONS = {
    errno.ENOENT: "this machine has no PMU that counts it (a VM without a virtual PMU?)",
    errno.ENOSYS: "perf_event_open is not available",
    errno.EOPNOTSUPP: "not supported by this CPU or kernel",
    errno.EINVAL: "the kernel rejected its encoding",
    errno.EMFILE: "the process has no file descriptor left (each counted thread takes one per "
    "event): raise `ulimit -n`",
    errno.ENFILE: "the system has no file descriptor left (`sysctl fs.file-max`)",
}


def _needs_exclude_kernel(tid: int) -> bool:
    """``False`` if kernel-mode counting is allowed; raise ``PerfUnavailable`` if nothing is."""
    for exclude_kernel in (False, True):
        try:
            ThreadGroup(
                tid, "probe", (), period_ns=0, exclude_kernel=exclude_kernel, pages=1
            ).close()
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM) and not exclude_kernel:
                continue
            raise PerfUnavailable(event_problem("task-clock", exc)) from exc
        return exclude_kernel
    raise AssertionError("unreachable")


def _sample_cost_ns(tid: int, exclude_kernel: bool) -> float:
    """CPU time one dense sample costs this thread: the same busy loop without and with a
    sample every 100 µs, the fastest of three each."""
    period = 100_000
    plain = min(_busy_ns() for _ in range(3))
    clock = EventSpec("cpu-clock", "cpu-clock", kernel.TYPE_SOFTWARE, 0, kind="dense")
    group = ThreadGroup(
        tid, "probe", (clock,), period_ns=period, exclude_kernel=exclude_kernel, pages=16
    )
    try:
        sampled, samples = [], []
        for _ in range(3):
            group.start()
            sampled.append(_busy_ns())
            group.stop()
            records = ThreadRecords()
            for taken in group.take():
                parse(taken.data, group.dense_id, records)
            samples.append(len(records.group_samples))
    finally:
        group.close()
    fastest = min(range(3), key=sampled.__getitem__)
    return max(sampled[fastest] - plain, 0) / max(samples[fastest], 1)


def _busy_ns() -> int:
    """CPU time of a fixed ~20 ms of numpy work (which lets other Python threads run)."""
    values = np.full(1 << 16, 2.0)
    started = time.thread_time_ns()
    for _ in range(300):
        np.sqrt(values, out=values)
        values += 1.0
    return time.thread_time_ns() - started
