"""Run-level profiling on a Python ``RunOptions``: one run of the user's own session, profiled
by ORT itself into its own file.

ORT's C++ ``OrtRunOptions`` has carried ``enable_profiling`` and ``profile_file_prefix`` since
1.25 (what the C API's ``RunOptionsEnableProfiling`` sets); its Python binding lacks the
setters. A future binding that has them is used through them (``NativeSwitch``). Until then,
``FieldSwitch`` writes the two fields into the C++ object behind a ``RunOptions`` that
otel-ort made for the run, after finding them by behaviour, once per process:

1. The C++ object is the pointer pybind11 keeps right after the Python object's header.
2. Each Python-settable property is toggled on a fresh object and the bytes that flip are
   found: ``only_execute_path_to_fetches`` one byte, ``terminate`` one byte or none (ORT's
   main branch moves it to a termination state of its own), the log levels
   an int each, ``logid`` a libstdc++ string reading back what was set.
3. ``enable_profiling`` must be the zero byte right after ``only_execute_path_to_fetches``,
   and ``profile_file_prefix`` the string at the next 8-byte boundary, reading its default
   ``onnxruntime_run_profile`` (ORT's declaration order since 1.25).
4. A private session of a one-node model (``probe_model``) runs once with both fields set
   and must write a profile holding its node; a run without them must write nothing.

Memory is read through ``/proc/self/mem`` while searching (an unmapped address is an error,
not a crash). Anything unexpected refuses the layout (``Unrecognized``): no byte is written.
Each write re-checks its object first (the flag reads 0, the prefix its default) and assigns
the string only through libstdc++'s own ``std::string::assign``.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from otel_ort._util.forking import renew_locks_in_child
from otel_ort.profiling import probe_model

DEFAULT_PREFIX = b"onnxruntime_run_profile"
"""``OrtRunOptions::profile_file_prefix``'s default (1.25 and later)."""
_ASSIGN = b"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE6assignEPKc"
"""libstdc++'s ``std::string::assign(const char*)``."""
_WINDOW = 256
"""Bytes of the C++ object searched for the fields."""
_STRING = 32
"""sizeof(std::string) in libstdc++'s new ABI: {char* data, size_t size, 16-byte buffer}."""
_LOGID = "otel-ort-run-options-layout-probe"  # longer than 15: not in the string's own buffer


@dataclass(frozen=True, slots=True)
class Unrecognized:
    """Why run-level profiling cannot be switched on in this process (said once, in the log
    and on each selected run's span)."""

    reason: str
    transient: bool = False
    """Not known yet (the probe could not run now): asked again on a later run."""


class LayoutChanged(Exception):
    """A ``RunOptions`` did not read as the recognised layout says: nothing was written."""


class RunProfilingSwitch(Protocol):
    """Switches run-level profiling on for runs given a ``RunOptions``."""

    def enable(self, options: Any, prefix: str) -> None:
        """Make ``options`` (a fresh ``RunOptions`` of otel-ort's) profile its run into
        ``<prefix>_<time>.json``; ``LayoutChanged`` if it cannot be done safely."""


class NativeSwitch:
    """An ORT whose Python ``RunOptions`` has ``enable_profiling`` and
    ``profile_file_prefix``."""

    def enable(self, options: Any, prefix: str) -> None:
        options.profile_file_prefix = prefix
        options.enable_profiling = True


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the fields are, in bytes from the start of ``OrtRunOptions``."""

    enable_profiling: int
    profile_file_prefix: int


class FieldSwitch:
    """Writes the recognised fields of the C++ object behind a ``RunOptions``."""

    def __init__(self, layout: Layout, assign: Any) -> None:
        self.layout = layout
        self._assign = assign

    def enable(self, options: Any, prefix: str) -> None:
        """(Reads go through ``/proc/self/mem``, a few microseconds: a pointer that is not
        what the layout says raises instead of crashing.)"""
        try:
            memory = _Memory()
        except _Refused as exc:
            raise LayoutChanged(str(exc)) from None
        try:
            self._write(options, os.fsencode(prefix), memory)
        except _Refused as exc:
            raise LayoutChanged(f"a RunOptions could not be read: {exc}") from None
        finally:
            memory.close()

    def _write(self, options: Any, wanted: bytes, memory: _Memory) -> None:
        address = _cpp_object(options, memory)
        flag = address + self.layout.enable_profiling
        string = address + self.layout.profile_file_prefix
        if memory(flag, 1) != b"\0" or _read_string(string, memory) != DEFAULT_PREFIX:
            raise LayoutChanged("a RunOptions did not read as its recognised layout says")
        self._assign(ctypes.c_void_p(string), ctypes.c_char_p(wanted))
        if _read_string(string, memory) != wanted:  # never seen; then not enabled
            raise LayoutChanged("the profile prefix did not read back after it was assigned")
        ctypes.memset(flag, 1, 1)


_found: list[RunProfilingSwitch | Unrecognized] = []
_found_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_found_lock")


def run_profiling_switch() -> RunProfilingSwitch | Unrecognized:
    """This process's switch, found on first use (a few milliseconds: the probe's session and
    its profiled run), or why there is none."""
    if not _found:
        with _found_lock:
            if not _found:
                found = _find_switch()
                if isinstance(found, Unrecognized) and found.transient:
                    return found
                _found.append(found)
    return _found[0]


def _find_switch() -> RunProfilingSwitch | Unrecognized:
    import onnxruntime

    version = f"onnxruntime {onnxruntime.__version__}"
    if _has_native_setters(onnxruntime.RunOptions):
        switch: RunProfilingSwitch = NativeSwitch()
    else:
        try:
            switch = FieldSwitch(_find_layout(onnxruntime.RunOptions), _libstdcxx_assign())
        except _Refused as exc:
            return Unrecognized(f"{version}: {exc}")
    try:
        problem = _prove(onnxruntime, switch)
    except probe_model.PoolBusy as exc:
        return Unrecognized(f"{version}: {exc}", transient=True)
    return Unrecognized(f"{version}: {problem}") if problem else switch


def _has_native_setters(cls: Any) -> bool:
    return all(
        hasattr(getattr(cls, name, None), "__set__")
        for name in ("enable_profiling", "profile_file_prefix")
    )


class _Refused(Exception):
    """The layout is not recognised; the message says what was unexpected."""


class _Memory:
    """Reads this process's memory through ``/proc/self/mem``: an unmapped address raises
    ``_Refused`` instead of crashing the process."""

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/self/mem", os.O_RDONLY)
        except OSError as exc:
            raise _Refused(f"cannot read /proc/self/mem ({exc.strerror})") from None

    def __call__(self, address: int, size: int) -> bytes:
        try:
            data = os.pread(self._fd, size, address)
        except (OSError, OverflowError, ValueError):
            data = b""
        if len(data) != size:
            raise _Refused(f"address {address:#x} cannot be read")
        return data

    def close(self) -> None:
        os.close(self._fd)


def _cpp_object(options: Any, read: Any) -> int:
    """The address of the C++ object pybind11 keeps right after the Python object's header."""
    (address,) = struct.unpack("<Q", read(id(options) + object.__basicsize__, 8))
    if not address or address % 8:
        raise LayoutChanged(f"RunOptions holds no aligned C++ object pointer ({address:#x})")
    return int(address)


def _read_string(address: int, read: Any) -> bytes | None:
    """A libstdc++ (new ABI) ``std::string``'s bytes; ``None`` where it does not read as one
    (or points where nothing can be read)."""
    try:
        data, size = struct.unpack("<QQ", read(address, 16))
        if not data or size > 4096:
            return None
        if data == address + 16:  # in the object's own buffer: a short string
            if size > 15:
                return None
        elif struct.unpack("<Q", read(address + 16, 8))[0] < max(size, 16):
            return None  # outside, in a buffer of at least 16 bytes holding it all
        return bytes(read(data, size))
    except _Refused:
        return None


def _find_layout(run_options_class: Any, address_of: Any = None) -> Layout:
    """Find the two fields by toggling what Python can set (``_Refused`` if anything is not
    as expected). ``address_of(options, read)``: where the object's C++ side is (pybind11's
    pointer; tests give a buffer of their own)."""
    if sys.platform != "linux" or sys.byteorder != "little" or sys.maxsize != 2**63 - 1:
        raise _Refused(f"only 64-bit little-endian Linux is recognised, not {sys.platform}")
    memory = _Memory()
    try:
        options = run_options_class()
        try:
            address = (address_of or _cpp_object)(options, memory)
        except LayoutChanged as exc:
            raise _Refused(str(exc)) from None
        base = memory(address, _WINDOW)

        def flipped(name: str, value: Any) -> list[int]:
            before = getattr(options, name)
            setattr(options, name, value)
            changed = memory(address, _WINDOW)
            setattr(options, name, before)
            if memory(address, _WINDOW) != base:
                raise _Refused(f"setting RunOptions.{name} back did not restore its bytes")
            return [i for i in range(_WINDOW) if changed[i] != base[i]]

        terminate_bytes = flipped("terminate", True)  # none: a termination state elsewhere
        terminate = _one_bool(terminate_bytes, base, "terminate") if terminate_bytes else -1
        only = _one_bool(
            flipped("only_execute_path_to_fetches", True), base, "only_execute_path_to_fetches"
        )
        for name in ("log_severity_level", "log_verbosity_level"):
            _one_int(flipped(name, 3), name)
        options.logid = _LOGID
        logid = memory(address, _WINDOW)
        strings = [
            offset
            for offset in range(0, _WINDOW - _STRING + 1, 8)
            if _read_string(address + offset, memory) == _LOGID.encode()
        ]
        if (
            len(strings) != 1
            or logid[strings[0] : strings[0] + 8] == base[strings[0] : strings[0] + 8]
        ):
            raise _Refused("RunOptions.logid was not found as one libstdc++ string")
        enable = only + 1
        prefix = (only + 2 + 7) // 8 * 8
        if enable in (terminate, only) or base[enable] != 0:
            raise _Refused("no clear byte follows only_execute_path_to_fetches")
        if prefix + _STRING > _WINDOW or _read_string(address + prefix, memory) != DEFAULT_PREFIX:
            raise _Refused(
                "profile_file_prefix was not found reading its default after enable_profiling"
            )
        return Layout(enable, prefix)
    finally:
        memory.close()


def _one_bool(offsets: list[int], base: bytes, name: str) -> int:
    if len(offsets) != 1 or base[offsets[0]] != 0:
        raise _Refused(f"RunOptions.{name} did not flip exactly one clear byte")
    return offsets[0]


def _one_int(offsets: list[int], name: str) -> int:
    if not offsets or offsets[0] % 4 or offsets[-1] >= offsets[0] + 4:
        raise _Refused(f"RunOptions.{name} did not change one aligned int")
    return offsets[0]


def _libstdcxx_assign() -> Any:
    """``std::string::assign(const char*)`` from the libstdc++ ORT's Python module uses (it
    must already be loaded: another copy's strings are not ORT's)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "libstdc++.so.6" in line}
    except OSError as exc:
        raise _Refused(f"cannot read /proc/self/maps ({exc.strerror})") from None
    if len(paths) != 1:
        raise _Refused(f"{len(paths)} copies of libstdc++.so.6 are loaded, not one")
    try:
        function = getattr(ctypes.CDLL(paths.pop()), _ASSIGN.decode())
    except (OSError, AttributeError) as exc:
        raise _Refused(f"libstdc++'s std::string::assign was not found: {exc}") from None
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return function


def _prove(onnxruntime: Any, switch: RunProfilingSwitch) -> str:
    """Run the probe model once profiled and once not, on otel-ort's own session; what went
    wrong, or ``""`` (``PoolBusy``: try again later)."""
    directory = tempfile.mkdtemp(prefix="otel-ort-probe-")
    try:
        session = probe_model.PrivateSession(onnxruntime, threads=1)
        feeds = {probe_model.INPUT: np.ones(4, np.float32)}
        session.run(feeds)
        if os.listdir(directory):
            return "a run that was not profiled wrote a file"
        profiled = onnxruntime.RunOptions()
        switch.enable(profiled, os.path.join(directory, "probe"))
        session.run(feeds, profiled)
        files = glob.glob(os.path.join(glob.escape(directory), "probe_*.json"))
        if len(files) != 1:
            return f"the probe's profiled run wrote {len(files)} profile files, not one"
        with open(files[0], encoding="utf-8") as file:
            events = json.load(file)
        if not any(isinstance(event, dict) and event.get("cat") == "Node" for event in events):
            return "the probe's profile holds no node"
        return ""
    except probe_model.PoolBusy:
        raise
    except (LayoutChanged, OSError, ValueError, RuntimeError) as exc:
        return f"the probe's profiled run failed: {exc}"
    except Exception as exc:  # ORT's own exception types
        return f"the probe's profiled run failed: {exc!r}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)
