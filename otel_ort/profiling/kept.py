"""A profiled run's files: ORT's raw profile read, then the enriched copy published in its place.

``otel-ort profile`` reads what ORT wrote with ``read_run``, does its span work, then
``publish_run``. The profiling engine's conversion reads the file itself, makes the
enriched copy's bytes with ``kept_bytes`` and writes them with ``publish_kept`` (in the
conversion process, or on the worker); the worker then applies retention.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from otel_ort.profiles import chrome
from otel_ort.profiles.reader import ProfileError, read_profile
from otel_ort.profiles.records import Profile
from otel_ort.profiling.store import ProfileStore, RunFiles, remove_files

try:  # ISA-L's gzip: the same format, six times faster than zlib's (docs/decisions.md)
    from isal.igzip import compress as _gzip_compress

    GZIP_LEVEL = 1
    """ISA-L's level 1: a 360 KB profile in 0.14 ms, to 37 KB (zlib's level 3: 0.90 ms, to
    29 KB; measured 2026-11-27); higher ISA-L levels gain 2 % for four times the CPU."""
except ImportError:  # no ISA-L wheel for this machine: zlib's
    from gzip import compress as _gzip_compress  # type: ignore[assignment]

    GZIP_LEVEL = 3
    """zlib's: about ten times smaller than the JSON in 0.9 ms for a 360 KB profile; higher
    levels take twice as long for a few percent."""


def read_run(store: ProfileStore, files: RunFiles, start_ns: int) -> Profile:
    """ORT's profile of one run (``ts == 0`` at ``start_ns``); ``ProfileError`` when ORT wrote
    none or it cannot be read (the unreadable file is deleted)."""
    written = store.written(files)
    if not written:
        raise ProfileError(files.prefix, "ONNX Runtime wrote no profile file for this run")
    try:
        return read_profile(written[-1], start_ns)
    except ProfileError:
        remove_files(written)
        raise


def publish_run(
    store: ProfileStore,
    files: RunFiles,
    profile: Profile,
    other_data: Mapping[str, Any],
    thread: tuple[int, str],
    tracks: chrome.EventText | None = None,
) -> int:
    """Publish ``profile``'s events enriched and gzip-compressed (``kept_bytes``), delete ORT's
    file, apply retention; return how many old files it deleted."""
    data = kept_bytes(profile, other_data, thread, os.getpid(), tracks)
    size = publish_kept(data, files.path)
    remove_files(store.written(files))
    return store.retain(files.path, size)


def kept_bytes(
    profile: Profile,
    other_data: Mapping[str, Any],
    thread: tuple[int, str],
    pid: int,
    tracks: chrome.EventText | None = None,
) -> bytes:
    """``profile``'s events enriched and gzip-compressed: ``thread``, the OS id and name of the
    thread that ran it, in process ``pid``; ``tracks``: perf counter tracks after them."""
    data = chrome.enrich(
        profile.events,
        other_data={chrome.START_TIME_KEY: profile.start_ns, **other_data},
        process_name=f"onnxruntime (pid {pid})",
        thread_names={thread[0]: f"{thread[1]} (run)"},
        tracks=tracks,
    )
    return _gzip_compress(data, GZIP_LEVEL, mtime=0)


def publish_kept(data: bytes, path: str) -> int:
    """Write a run's kept file (``kept_bytes``) at ``path``, atomically, readable by this user
    only; its size in bytes."""
    ProfileStore.publish(data, path)
    return len(data)
