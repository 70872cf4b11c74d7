"""Enrich ORT's Chrome-trace JSON of one profiled run, keeping it loadable by Perfetto and
Chrome DevTools' Performance panel (chrome://tracing's successor).

ORT writes a bare array of events. The kept file is the object form of the same format:
``traceEvents`` holds ORT's events unchanged after metadata events naming the process and
threads (``"ph": "M"``), and ``otherData`` holds the run's trace id, span id, absolute start
time and what ran it. The ``model_run`` event's args also get the trace and span ids, so
clicking the run in a viewer shows which trace it belongs to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from msgspec import Raw

from otel_ort.profiles import ort_events
from otel_ort.profiles.ort_events import OrtEvent

START_TIME_KEY = "start_time_unix_ns"
"""``otherData`` key: absolute time (ns since the epoch) of ``ts == 0``; the reader uses it."""

VIEWERS = "open in https://ui.perfetto.dev or Chrome DevTools' Performance panel"
"""Where a kept file can be looked at, as the commands say it."""

_GPU_PID = -1


@dataclass(frozen=True)
class EventText:
    """Events of process ``pid`` already written as JSON: their texts joined by commas."""

    pid: int
    text: bytes


def enrich(
    events: list[Any],
    *,
    other_data: Mapping[str, Any],
    process_name: str,
    thread_names: Mapping[int, str],
    tracks: EventText | None = None,
) -> bytes:
    """The enriched file's bytes from ORT's events (as read), then ``tracks``: counter
    events (``"ph": "C"``) of one process, such as ``perf.tracks.counter_text`` writes, as if
    they ended ``events``. ``thread_names`` maps OS thread ids to names; other threads get a
    generic one."""
    ids = {key: other_data[key] for key in ("trace_id", "span_id") if key in other_data}
    threads = _Threads()
    if tracks is not None and tracks.text and type(tracks.pid) is int:
        threads.pids.add(tracks.pid)
    threads.scan(events, ids)
    pids, tids = threads.pids, threads.tids
    metadata: list[dict[str, Any]] = []
    for pid in sorted(pids):
        name = "GPU kernels" if pid == _GPU_PID else process_name
        metadata.append(_meta("process_name", pid, 0, name))
    for pid, tid in sorted(tids):
        if pid == _GPU_PID:
            continue
        metadata.append(_meta("thread_name", pid, tid, thread_names.get(tid, f"ORT thread {tid}")))
    text = tracks.text if tracks is not None else b""
    if threads.typed:  # ORT's args written back as they were read, the tracks' text too
        typed = {  # (a Raw is written as it is: here, the tracks' events, commas between)
            "traceEvents": [*metadata, *events, *([Raw(text)] if text else [])],
            "displayTimeUnit": "ms",
            "otherData": other_data,
        }
        try:
            return ort_events.encode(typed)
        except (UnicodeEncodeError, TypeError, ValueError):  # a lone surrogate in a name
            events = [ort_events.as_dict(e) if type(e) is OrtEvent else e for e in events]
    enriched = {
        "traceEvents": [*metadata, *events, *(orjson.loads(b"[" + text + b"]") if text else [])],
        "displayTimeUnit": "ms",
        "otherData": other_data,
    }
    return dumps(enriched)


def dumps(document: Any) -> bytes:
    """Compact JSON: orjson's (several times faster, on the worker's path), else the standard
    library's for what only it writes (an integer over 64 bits)."""
    try:
        return orjson.dumps(document)
    except orjson.JSONEncodeError:
        return json.dumps(document, separators=(",", ":")).encode()


class _Threads:
    """The processes and threads the events name; whether any event was read by type."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.tids: set[tuple[int, int]] = set()
        self.typed = False

    def scan(self, events: list[Any], ids: Mapping[str, Any]) -> None:
        """Note each event's process and thread; give the ``model_run`` event ``ids``."""
        for event in events:
            if type(event) is OrtEvent:  # a file in ORT's own shape (its fields' types checked)
                self.typed = True
                self.add(event.pid, event.tid, event.ph)
                if event.name == "model_run" and ids:
                    args = ort_events.split_args(event.args)
                    if args is not None:  # an object (as ORT writes): the ids go in it
                        raw = {key: Raw(orjson.dumps(value)) for key, value in ids.items()}
                        event.args = Raw(ort_events.encode({**args, **raw}))
            elif isinstance(event, dict):
                pid, tid = event.get("pid"), event.get("tid")
                if isinstance(pid, int) and isinstance(tid, int):
                    self.add(pid, tid, event.get("ph"))
                if event.get("name") == "model_run" and isinstance(event.get("args"), dict):
                    event["args"].update(ids)

    def add(self, pid: int, tid: int, ph: object) -> None:
        self.pids.add(pid)
        if ph != "C":  # a counter track is the process's, not a thread's
            self.tids.add((pid, tid))


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
