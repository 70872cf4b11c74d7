"""What otel-ort's kept files add to ORT's events, read back for the report.

The kept file (``profiling/chrome.py``) carries ``otherData`` (trace id, span id, session,
model), ``thread_name`` metadata events, the trace and span ids on each ``model_run`` event,
and, when perf counted the run, counter tracks (read by ``otel_ort.perf.tracks``). ORT's own
files have none of these; every function here then returns an empty result.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from otel_ort.profiles.reader import GZIP_MAGIC, ProfileError, file_bytes
from otel_ort.profiles.records import RunRecord

_OTHER_DATA = '"otherData"'
_COLON = re.compile(r"\s*:\s*")
_SCAN_BYTES = 1 << 16
"""``otherData`` is looked for in this much of the file's end, then of its start."""


def other_data(path: str) -> dict[str, Any]:
    """The file's ``otherData`` object, ``{}`` when it has none or cannot be read.

    otel-ort writes it after the events, so the end of the file is read rather than the
    whole file parsed a second time; the start is tried too (other writers put it first).
    """
    try:
        with open(path, "rb") as file:
            compressed = file.read(2) == GZIP_MAGIC
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - _SCAN_BYTES))
            chunks = [file.read()]
            if size > _SCAN_BYTES:
                file.seek(0)
                chunks.append(file.read(_SCAN_BYTES))
        if compressed:  # a kept file: its end is only known decompressed
            data = file_bytes(path)
            chunks = [data[-_SCAN_BYTES:], data[:_SCAN_BYTES]]
    except (OSError, ProfileError):
        return {}
    for chunk in chunks:
        found = _decode_other_data(chunk.decode("utf-8", "replace"))
        if found is not None:
            return found
    return {}


def _decode_other_data(text: str) -> dict[str, Any] | None:
    at = text.rfind(_OTHER_DATA)
    if at < 0:
        return None
    colon = _COLON.match(text, at + len(_OTHER_DATA))
    if colon is None or colon.end() == at + len(_OTHER_DATA):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, colon.end())
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def thread_names(events: Sequence[Any]) -> dict[int, str]:
    """OS thread id → name, from the file's ``thread_name`` metadata events."""
    names: dict[int, str] = {}
    for event in events:
        if (
            isinstance(event, dict)
            and event.get("ph") == "M"
            and event.get("name") == "thread_name"
            and type(event.get("tid")) is int
            and isinstance(event.get("args"), dict)
            and isinstance(event["args"].get("name"), str)
        ):
            names.setdefault(event["tid"], event["args"]["name"])
    return names


def run_ids(
    events: Sequence[Any], runs: Sequence[RunRecord], other: dict[str, Any]
) -> list[tuple[str | None, str | None]]:
    """Each run's (trace id, span id): from its ``model_run`` event's args, else, for a file
    of one run, from ``otherData``."""
    by_start: dict[float, tuple[str | None, str | None]] = {}
    for event in events:
        if (
            isinstance(event, dict)
            and event.get("name") == "model_run"
            and event.get("ph", "X") == "X"
            and isinstance(event.get("args"), dict)
        ):
            trace_id, span_id = _id(event["args"], "trace_id"), _id(event["args"], "span_id")
            ts = event.get("ts")
            if (trace_id or span_id) and isinstance(ts, int | float):
                by_start.setdefault(ts, (trace_id, span_id))
    fallback = (_id(other, "trace_id"), _id(other, "span_id")) if len(runs) == 1 else (None, None)
    return [by_start.get(run.ts, fallback) for run in runs]


def _id(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)  # all zeros: no trace (an invalid span context)
    return value if isinstance(value, str) and value.strip("0") else None
