"""perf's C part (``_node_counts``) gives what the numpy code it stands in for gives: flight
rings' records read for a window (``parse_recent``, ``trim_recent``, ``reaches``) on fuzzed
rings, plain or not, and the node attributes made from columns (``node_attributes``) on
fuzzed columns. Each case runs both ways: the C part, then numpy (the module's
``_node_counts`` set to ``None``)."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from otel_ort.perf import records, report
from otel_ort.perf.attribution import Attribution, NodeColumns, ThreadColumns
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
