"""perf's C part (``_node_counts``) gives what the numpy code it stands in for gives: flight
rings' records read for a window (``parse_recent``, ``trim_recent``, ``reaches``) on fuzzed
rings, plain or not, a thread's counts attributed to node windows (``attribute``) on fuzzed
records and windows, and the node attributes made from columns (``node_attributes``) on
fuzzed columns. Each case runs both ways: the C part, then numpy (the module's
``_node_counts`` set to ``None``)."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from otel_ort.perf import attribution, records, report
from otel_ort.perf.attribution import (
    Attribution,
    Counted,
    NodeColumns,
    ThreadColumns,
    ThreadRun,
    attribute,
)
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.records import ThreadRecords, parse_recent, reaches, trim_recent
from otel_ort.perf.report import node_attributes
from tests.helpers.native import native_part

SINCE, UNTIL = 10_000, 20_000


@pytest.fixture(autouse=True)
def _built() -> None:
    native_part("otel_ort.perf._node_counts")


def _both(monkeypatch: pytest.MonkeyPatch, module: Any, call: Callable[[], Any]) -> Any:
    """``call()`` with the C part, then with numpy's code; both results."""
    assert module._node_counts is not None  # (not with OTEL_ORT_NATIVE=off)
    native = call()
    with monkeypatch.context() as patched:
        patched.setattr(module, "_node_counts", None)
        return native, call()


def _ring(rng: random.Random, plain: bool) -> bytes:
    """A flight ring's bytes, the newest first: switches and samples of two events around
    the window, now and then a time out of order, a throttle record (when not ``plain``)
    or bytes of a record cut short."""
    out = []
    time = SINCE + rng.randrange(-2_000, 12_000)
    for _ in range(rng.randrange(0, 40)):
        time -= rng.randrange(0, 120) if rng.random() > 0.05 else -rng.randrange(1, 300)
        stamp = time if rng.random() > 0.01 else 2**63 + time  # past int64: wraps as numpy's
        if rng.random() < 0.05:  # on an edge of the window
            time = stamp = rng.choice((SINCE - 1, SINCE, UNTIL, UNTIL + 1))
        if rng.random() < 0.5:
            misc = 0x2000 if rng.random() < 0.5 else rng.choice((0, 0x4000))
            out.append(struct.pack("IHHIIQQ", 14, misc, 32, 1, 7, stamp, rng.choice((1, 8))))
        else:
            event = rng.choice((2, 3, 2**63 + 5))
            out.append(struct.pack("IHHQIIQ", 9, 0, 32, event, 1, 7, stamp))
    if not plain and out:
        at = rng.randrange(len(out))
        out.insert(at, struct.pack("IHHQQQIIQQ", 5, 0, 56, time, 2, 2, 1, 7, time, 2))
    data = b"".join(out)
    return data + bytes(rng.randrange(0, 32)) if rng.random() < 0.2 else data


@pytest.mark.parametrize("plain", [True, False])
def test_a_flight_rings_records_are_read_in_c_as_with_numpy(
    monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    rng = random.Random(35 + plain)
    for _ in range(600):
        data = _ring(rng, plain)

        def parsed(data: bytes = data) -> tuple[Any, ...]:
            out = ThreadRecords()
            reached = parse_recent(data, (SINCE, UNTIL), out)
            return reached, out.switches, list(out.events.items()), out.throttles

        assert len(set(map(repr, _both(monkeypatch, records, parsed)))) == 1
        in_c = native_part("otel_ort.perf._node_counts").recent_records(data, SINCE, UNTIL)
        assert (in_c is NotImplemented) is (not plain and len(data) >= 32)
        trimmed = _both(monkeypatch, records, partial(trim_recent, data, (SINCE, UNTIL)))
        assert trimmed[0] == trimmed[1]
        for switches in (True, False):
            reached = _both(monkeypatch, records, partial(reaches, data, SINCE, switches))
            assert reached[0] is reached[1]


def _columns(rng: random.Random, nodes: int, tids: list[int]) -> RunCounts:
    """A counted run's columns: per thread and alias, whole values, a few NaN (an alias not
    counted during a node), each thread on a CPU during some nodes only."""
    aliases = ("task-clock", "context-switches", "page-faults")[: rng.randrange(1, 4)]
    threads = []
    for tid in tids:
        values = {
            alias: np.array(
                [
                    math.nan if rng.random() < 0.03 else float(rng.choice((0, 3, 4095, 10**12)))
                    for _ in range(nodes)
                ]
            )
            for alias in aliases
        }
        on_cpu = np.array([rng.random() < 0.6 for _ in range(nodes)], dtype=bool)
        threads.append(ThreadColumns(tid, on_cpu, values))
    sums = {alias: np.sum([t.values[alias] for t in threads], axis=0) for alias in aliases}
    columns = NodeColumns(aliases, sums, tuple(threads), nodes)
    return RunCounts(Attribution(columns=columns), 0, len(tids), 0, ())


@pytest.mark.parametrize("tids", [[41], [41, 7], [9, 41, 7]])
def test_node_attributes_are_made_in_c_as_with_numpy(
    monkeypatch: pytest.MonkeyPatch, tids: list[int]
) -> None:
    rng = random.Random(sum(tids))
    for nodes in (0, 1, 2, 17, 415):
        counts = _columns(rng, nodes, tids)
        native, reference = _both(monkeypatch, report, partial(node_attributes, counts))
        assert [list(node.items()) for node in native] == [list(node.items()) for node in reference]
        assert len(native) == nodes


def test_what_the_c_part_refuses() -> None:
    counts = native_part("otel_ort.perf._node_counts")
    keys = ("perf.a",), ("perf.a.by_thread",), "perf.thread_ids", (7,)
    with pytest.raises(ValueError, match="other shapes"):
        counts.node_dicts(
            *keys, np.zeros((2, 3), np.int64), np.zeros((1, 2), bool), np.zeros(3, bool)
        )
    with pytest.raises(ValueError, match="a split key per value key"):
        counts.node_dicts((), (), "perf.thread_ids", (), b"", b"", b"")
    with pytest.raises(TypeError):
        counts.node_dicts(["perf.a"], ("x",), "t", (), b"", b"", b"")


def test_the_c_part_adds_to_what_earlier_rings_gave_and_takes_the_windows_edges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread's second ring adds to its first's records; times on the window's edges."""
    first = struct.pack("IHHQIIQ", 9, 0, 32, 2, 1, 7, SINCE + 5)
    second = b"".join(
        [
            struct.pack("IHHQIIQ", 9, 0, 32, 2, 1, 7, UNTIL),
            struct.pack("IHHIIQQ", 14, 0x2000, 32, 1, 7, SINCE, 1),
            struct.pack("IHHQIIQ", 9, 0, 32, 3, 1, 7, SINCE),
        ]
    )

    def both_rings() -> tuple[Any, ...]:
        out = ThreadRecords()
        parse_recent(first, (SINCE, UNTIL), out)
        reached = parse_recent(second, (SINCE, UNTIL), out)
        return reached, out.switches, list(out.events.items())

    native, reference = _both(monkeypatch, records, both_rings)
    assert native == reference == (False, [(SINCE, True)], [(2, [SINCE + 5, UNTIL]), (3, [SINCE])])
    in_c = native_part("otel_ort.perf._node_counts")
    assert in_c.recent_records(second, 2**63, 2**64) is NotImplemented
    assert in_c.reaches_back(second, -(2**64), True) is NotImplemented


KINDS = {"task-clock": "time", "context-switches": "switches", "page-faults": "sparse"}


def _thread(rng: random.Random, tid: int, span: tuple[int, int]) -> ThreadRun:
    """One thread's records around ``span``: switches in and out (in ring order, so not
    sorted), page-fault samples, at times inside and outside its window, now and then none,
    or records that are not all there."""
    low, high = span
    begin, end = low - rng.randrange(0, 300), high + rng.randrange(0, 300)
    if rng.random() < 0.03:  # a window of no length, or one the wrong way round
        end = begin - rng.choice((0, 50))
    switches = [
        (rng.randrange(begin - 400, end + 400), rng.random() < 0.5)
        for _ in range(rng.choice((0, 1, 2, 7, 60)))
    ]
    if switches and rng.random() < 0.1:
        switches.append(switches[0])  # the same moment twice
    faults = [rng.randrange(begin - 200, end + 200) for _ in range(rng.choice((0, 3, 30)))]
    incomplete = frozenset(name for name in ("switches", "page-faults") if rng.random() < 0.08)
    records = ThreadRecords(switches=switches, events={5: faults} if faults else {})
    ids = {"task-clock": 1, "context-switches": 1, "page-faults": 5}
    return ThreadRun(tid, (begin, end), None, None, records, ids, incomplete, rng.random() < 0.5)


def _windows(rng: random.Random, nodes: int) -> list[tuple[int, int]]:
    """Node windows in order of start, apart or nested (a control-flow node's subgraph)."""
    windows: list[tuple[int, int]] = []
    at = 10**9 + rng.randrange(0, 10**6)
    for _ in range(nodes):
        if windows and rng.random() < 0.15:  # inside the previous one
            start, stop = windows[-1]
            inner = rng.randrange(start, stop + 1)
            windows.append((inner, rng.randrange(inner, stop + 1)))
            continue
        at += rng.randrange(0, 50)
        windows.append((at, at + rng.randrange(0, 400)))
        at = windows[-1][1]
    return windows


def _attributed(result: Attribution) -> Any:
    assert result.columns is not None
    threads = [
        (t.tid, t.on_cpu.tolist(), {a: v.tolist() for a, v in t.values.items()})
        for t in result.columns.threads
    ]
    return repr((threads, result.totals, result.between))  # (NaN as nan: comparable)


def test_a_threads_counts_are_attributed_in_c_as_with_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_c = native_part("otel_ort.perf._node_counts")
    answered: list[bool] = []

    def thread_values(*args: Any) -> Any:
        made = in_c.thread_values(*args)
        answered.append(made is not NotImplemented)
        return made

    monkeypatch.setattr(attribution, "_node_counts", SimpleNamespace(thread_values=thread_values))
    rng = random.Random(415)
    for _ in range(400):
        windows = _windows(rng, rng.choice((0, 1, 5, 40)))
        span = (windows[0][0], windows[-1][1]) if windows else (10**9, 10**9 + 1000)
        runs = [_thread(rng, tid, span) for tid in rng.sample(range(1, 99), rng.randrange(1, 4))]
        counted = Counted(KINDS, "task-clock")
        native, reference = _both(
            monkeypatch, attribution, partial(attribute, runs, windows, counted)
        )
        assert _attributed(native) == _attributed(reference)
    assert len(answered) > 400 and all(answered)  # the C part did every thread


def test_dense_events_are_attributed_with_numpy() -> None:
    """The C part takes the switch-based and sparse kinds only."""
    run = ThreadRun(1, (0, 10), None, None, ThreadRecords(), {"cycles": 2})
    counted = Counted({"task-clock": "time", "cycles": "dense"}, "task-clock")
    empty = np.zeros(1)
    result = Attribution(columns=NodeColumns((), {}, (), 1))
    assert attribution._values_in_c(run, 0, empty, empty, empty > 0, counted, result) is None


def test_records_of_another_form_go_to_numpy() -> None:
    """A switched-out flag that is no bool, or a time whose distance to the origin is past
    int64 (numpy would wrap it), is numpy's to attribute."""
    in_c = native_part("otel_ort.perf._node_counts")
    windows = np.zeros(1), np.ones(1), np.ones(1, dtype=bool)
    specs = ((0, None, False),)
    assert in_c.thread_values([(5, 1)], 0, 10, False, 0, *windows, specs) is NotImplemented
    assert in_c.thread_values([(5, True)], 0, 10, 1, 0, *windows, specs) is NotImplemented
    far = [(2**62, True)]
    assert in_c.thread_values(far, 0, 10, False, -(2**62), *windows, specs) is NotImplemented
    sparse = ((2, [2**62], False),)
    assert in_c.thread_values([], 0, 10, False, -(2**62), *windows, sparse) is NotImplemented
    made = in_c.thread_values([(5, True)], 0, 10, False, 0, *windows, specs)
    assert made is not NotImplemented and made[0][1:] == (5.0, 4.0)
