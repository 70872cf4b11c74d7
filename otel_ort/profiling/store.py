"""The profile directory: where ORT writes a profiled run's file, where the kept file goes, and
how many are kept.

Layout: ORT writes each profiled run into ``<dir>/.pending/<tag>-<n>_<ORT's timestamp>.json``
(every run its own prefix: runs sharing one collide); the conversion (in the conversion process
or on the worker) then publishes the enriched file, gzip-compressed, as
``<dir>/otel-ort_<local time>_<tag>-<n>.json.gz`` (its path is known before the run, so the
run span can name it), and the worker deletes the pending one and applies retention.
``<tag>`` is the pid and a random part: processes in other pid namespaces (containers) may
share the directory, and a pid comes back. Each store holds a lock (``flock``) on
``<dir>/.pending/<tag>-alive`` while its process lives. Raw and temporary files an hour old
whose tag's lock is free are leftovers of a process that ended before converting them: the
next store made for the directory deletes them (and old lock files), and logs how many. A live
process's files are never deleted, however old (``otel-ort profile`` converts its runs only
after the last one).

Safety: the directory is created 0700; an existing one must be a real directory (not a
symlink), owned by this user, writable, and closed to group and others; no parent may let
another user replace it (owned by someone else than this user or root, or writable by
others without the sticky bit; writable by its group is a warning). Published files are
0600. Retention deletes the oldest published files (by modification time) beyond
``max_files`` or ``max_bytes``, and counts what it deleted; other files are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import itertools
import logging
import os
import pathlib
import re
import secrets
import stat
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

_logger = logging.getLogger("otel_ort")

DEFAULT_MAX_FILES = 10_000
"""About as many as ``DEFAULT_MAX_BYTES`` holds at 54 KB a compressed file (a 415-node
recogniser run's file is 57 KB: then the bytes bind first, at about 78 minutes of two profiled
runs a second; docs/profiling.md)."""
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
_PENDING = ".pending"
_PREFIX = "otel-ort_"
KEPT_SUFFIX = ".json.gz"
"""A kept file's ending: gzip-compressed Chrome-trace JSON, which Perfetto and Chrome DevTools
open as they are."""
_TEMPORARY_SUFFIX = ".tmp"
"""Added to a kept file's path while it is being written (``temporary_path``)."""
_LEFTOVER_AGE_S = 3600.0
_ALIVE = "alive"
_TAG = re.compile(r"(?:^|_)(\d+-[0-9a-f]{6}-)")
"""A process's tag in the names of its files (``otel-ort_<date>-<time>_`` comes first in a
published one)."""


class ProfileDirError(ValueError):
    """A profile directory otel-ort must not or cannot use; the message says how to fix it."""


def default_profile_dir() -> str:
    """``$XDG_CACHE_HOME/otel-ort/profiles``, else ``~/.cache/otel-ort/profiles``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "otel-ort", "profiles")


def prepare_dir(directory: str) -> str:
    """Create ``directory`` (0700) or check an existing one; return its absolute path."""
    if not directory:
        raise ProfileDirError("is empty: give a directory, or leave it out for the default")
    path = os.path.abspath(os.path.expanduser(directory))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with contextlib.suppress(FileExistsError):  # also when another process just made it
            os.mkdir(path, 0o700)
    except OSError as exc:
        where = next(
            (f": {str(p)!r} is a file" for p in pathlib.Path(path).parents if p.is_file()), ""
        )
        raise ProfileDirError(
            f"directory {path!r} cannot be created ({exc.strerror}{where}); "
            "choose a directory you can write"
        ) from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ProfileDirError(
            f"directory {path!r} is a symbolic link; refusing it (another user could redirect "
            f"profiles through it): pass the real directory, {os.path.realpath(path)!r}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise ProfileDirError(f"directory {path!r} exists and is not a directory")
    if info.st_uid != os.getuid():
        raise ProfileDirError(
            f"directory {path!r} is owned by uid {info.st_uid}, not by this user "
            f"(uid {os.getuid()}); use a directory of your own"
        )
    if info.st_mode & 0o077:
        raise ProfileDirError(
            f"directory {path!r} is open to other users (mode {stat.filemode(info.st_mode)}); "
            f"profiles describe your model: run `chmod 700 {path}` or use another directory"
        )
    _check_parents(path)
    pending = os.path.join(path, _PENDING)
    try:
        os.makedirs(pending, mode=0o700, exist_ok=True)
        probe = os.path.join(pending, f"probe-{os.getpid()}-{secrets.token_hex(4)}")
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise ProfileDirError(
            f"directory {path!r} cannot be written ({exc.strerror}); "
            "choose a directory you can write"
        ) from None
    return path


_WARNED: set[tuple[str, str]] = set()
"""The (directory, parent) pairs whose group-writable parent was warned of."""


def _check_parents(path: str) -> None:
    """Refuse a directory whose parents let another user replace it: a parent (as written or
    with links resolved) owned by another user than this one or root, or open to others
    for writing without the sticky bit (``/tmp`` has it); warn of one open to its group only
    (with ``umask 002``, the user's own group usually)."""
    parents = {*pathlib.Path(path).parents, *pathlib.Path(os.path.realpath(path)).parents}
    for parent in sorted({os.path.realpath(each) for each in parents}, key=len):
        info = os.stat(parent)
        sticky = info.st_mode & stat.S_ISVTX
        if info.st_uid not in (0, os.getuid()):
            raise ProfileDirError(
                f"directory {path!r} is inside {parent!r}, owned by uid {info.st_uid}, "
                "who could replace it; use a directory under your own"
            )
        if info.st_mode & stat.S_IWOTH and not sticky:
            raise ProfileDirError(
                f"directory {path!r} is inside {parent!r}, which anyone can write "
                f"(mode {stat.filemode(info.st_mode)}), so another user could replace it: "
                f"run `chmod o-w {parent}` (or `chmod +t`) or use another directory"
            )
        if info.st_mode & stat.S_IWGRP and not sticky and (path, parent) not in _WARNED:
            _WARNED.add((path, parent))  # once: instrument() and its store both check
            _logger.warning(
                "otel-ort: profile_dir %r is inside %r, which its group (gid %d) can write: "
                "members of that group could replace it (`chmod g-w %s` closes it)",
                path,
                parent,
                info.st_gid,
                parent,
            )


@dataclass(frozen=True, slots=True)
class RunFiles:
    """Where one profiled run's profile goes."""

    prefix: str
    """Given to ORT: it writes ``<prefix>_<timestamp>.json``."""
    path: str
    """Where the enriched file is published."""


class ProfileStore:
    """Names the files of profiled runs and applies retention, for one profile directory."""

    def __init__(self, directory: str, max_files: int, max_bytes: int) -> None:
        self.directory = prepare_dir(directory)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.deleted = 0
        """Files deleted by retention so far."""
        self._numbers = itertools.count(1)
        self._published = os.path.join(self.directory, _PREFIX)
        self._pending = self._tag = ""
        """``<dir>/.pending/<tag>-`` and ``<tag>-``: what a run's names start with."""
        self._stamp = (0, "")
        """The local time of the last name, by the second (formatting it costs tens of µs)."""
        self._lock = threading.Lock()
        self._kept, self._kept_bytes = self._scan()  # oldest first
        self._alive: weakref.finalize[[str, int], ProfileStore] | None = None
        self._name_for_this_process()
        self._remove_leftovers()

    def _name_for_this_process(self) -> None:
        """A new tag, and its lock, held (and its file deleted) until this store is collected
        or the process ends. A forked child must call ``after_fork_in_child``: it closes the
        child's copy of the parent's descriptor (else the child's end would delete the
        parent's lock file)."""
        self._tag = f"{os.getpid()}-{secrets.token_hex(3)}-"
        self._pending = os.path.join(self.directory, _PENDING, self._tag)
        inherited = self._alive.detach() if self._alive is not None else None
        if inherited is not None:
            os.close(inherited[2][1])
        self._alive = None
        lock = self._pending + _ALIVE
        fd = -1
        try:  # a new name: no one else holds it
            fd = os.open(lock, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:  # NFS without locks: its files are swept as an ended one's
            _logger.warning(
                "otel-ort: cannot lock %s (%s): raw files this process keeps "
                "over an hour may be deleted by another",
                lock,
                exc.strerror,
            )
            if fd >= 0:
                _release(lock, fd)
            return
        self._alive = weakref.finalize(self, _release, lock, fd)

    def _remove_leftovers(self) -> None:
        """Delete raw and temporary files (and probe and lock files) older than
        ``_LEFTOVER_AGE_S`` whose process has ended: a live process's are spared."""
        pending = os.path.join(glob.escape(self.directory), _PENDING)
        leftovers = glob.glob(os.path.join(pending, "*.json"))
        pattern = f"{_PREFIX}*{_TEMPORARY_SUFFIX}"
        leftovers += glob.glob(os.path.join(glob.escape(self.directory), pattern))
        others = glob.glob(os.path.join(pending, "probe-*"))
        others += glob.glob(os.path.join(pending, f"*{_ALIVE}"))  # after the files they guard
        old = time.time() - _LEFTOVER_AGE_S
        alive: dict[str, bool] = {}
        removed = 0
        for path in leftovers + others:
            with contextlib.suppress(OSError):
                if os.lstat(path).st_mtime < old and not self._owner_alive(path, alive):
                    os.unlink(path)
                    removed += path not in others
        if removed:
            _logger.info(
                "otel-ort: deleted %d raw or temporary profile file(s) in %s left by processes "
                "that ended before converting them",
                removed,
                self.directory,
            )

    def new_run(self) -> RunFiles:
        """Fresh, unique names for one profiled run (cheap: called on the request thread)."""
        number = next(self._numbers)
        now = int(time.time())
        second, stamp = self._stamp
        if second != now:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
            self._stamp = now, stamp
        return RunFiles(
            f"{self._pending}{number}",
            f"{self._published}{stamp}_{self._tag}{number}{KEPT_SUFFIX}",
        )

    def void_prefix(self) -> str:
        """A profile prefix in a directory that is never created (in this user's 0700
        directory, so no one else can create it either): ORT writes no file there."""
        return os.path.join(f"{self._pending}void", "profile")

    def _owner_alive(self, path: str, known: dict[str, bool]) -> bool:
        """Whether the process that named ``path`` holds its tag's lock (``known``: the
        tags already tried)."""
        match = _TAG.search(os.path.basename(path))
        if match is None:  # a probe: never held for long
            return False
        tag = match[1]
        if tag not in known:
            known[tag] = _held(os.path.join(self.directory, _PENDING, tag + _ALIVE))
        return known[tag]

    @staticmethod
    def written(run: RunFiles) -> list[str]:
        """The files ORT wrote for ``run`` (normally one): ``<prefix>_*.json``. Matched by
        hand: ``glob`` compiles each run's new pattern to a regular expression, on the
        worker, with the GIL held, three times a run."""
        directory, name = os.path.split(run.prefix)
        start = name + "_"
        try:
            with os.scandir(directory or os.curdir) as entries:
                found = [
                    os.path.join(directory, entry.name)
                    for entry in entries
                    if entry.name.startswith(start) and entry.name.endswith(".json")
                ]
        except OSError:  # no such directory, as glob would say: none
            return []
        return sorted(found)

    @staticmethod
    def publish(data: bytes, path: str) -> None:
        """Write ``data`` to ``path`` as a 0600 file, atomically."""
        temporary = temporary_path(path)  # unique, as ``path`` is; O_EXCL: ours, and 0600
        fd = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            _remove(temporary)
            raise

    def retain(self, path: str, size: int | None = None) -> int:
        """Count the newly published ``path`` (of ``size`` bytes; when not given, looked up,
        and not counted if it is gone); delete the oldest files over the limits and return how
        many were deleted."""
        with self._lock:
            kept = self._kept
            if size is None:
                try:
                    size = os.stat(path).st_size
                except FileNotFoundError:  # another process's retention was first
                    return 0
            kept.append((path, size))
            self._kept_bytes += size
            deleted = 0
            while len(kept) > 1 and (
                len(kept) > self.max_files or self._kept_bytes > self.max_bytes
            ):
                oldest, oldest_size = kept.popleft()
                self._kept_bytes -= oldest_size
                deleted += _remove(oldest)  # not one already gone (by hand, another process)
            self.deleted += deleted
            return deleted

    def after_fork_in_child(self) -> None:
        """Names with the child's pid; and a lock a parent's thread held at the fork would
        stay held in the child."""
        self._lock = threading.Lock()
        self._name_for_this_process()

    def _scan(self) -> tuple[deque[tuple[str, int]], int]:
        """The published files already in the directory, oldest first, and their bytes."""
        found = []
        pattern = os.path.join(glob.escape(self.directory), f"{_PREFIX}*{KEPT_SUFFIX}")
        for path in glob.glob(pattern):
            try:
                info = os.stat(path)
            except OSError:
                continue
            found.append((info.st_mtime_ns, path, info.st_size))
        found.sort()
        return deque((path, size) for _, path, size in found), sum(size for *_, size in found)


def _held(lock: str) -> bool:
    """Whether another open file holds ``lock``'s flock; so when it cannot be told."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (EWOULDBLOCK), or no locks here: spare its files
        return True
    finally:
        os.close(fd)
    return False


def _release(lock: str, fd: int) -> None:
    """Delete a store's lock file, then free the lock."""
    with contextlib.suppress(OSError):
        os.unlink(lock)
    os.close(fd)


def temporary_path(path: str) -> str:
    """Where ``ProfileStore.publish`` writes ``path``'s bytes before renaming them to it."""
    return f"{path}{_TEMPORARY_SUFFIX}"


def remove_files(paths: list[str]) -> None:
    """Delete files, ignoring those already gone."""
    for path in paths:
        _remove(path)


def _remove(path: str) -> bool:
    """Delete ``path``; ``False`` if it was already gone or cannot be deleted (logged)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:  # one file in the way must not stop the others' deletion
        _logger.warning("otel-ort: cannot delete %s (%s); delete it by hand", path, exc.strerror)
        return False
    return True
