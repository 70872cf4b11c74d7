"""Optional libpfm4 binding (cffi ABI mode): event names such as ``perf::PAGE-FAULTS`` or
``skl::INST_RETIRED:ANY_P`` to ``perf_event_attr`` type and config values.

Nothing is compiled and libpfm4 is not a dependency: :func:`load` ``dlopen``-s it on first use and
raises :class:`PfmUnavailableError`, whose message says why, when it cannot.
"""

from __future__ import annotations

import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any

import cffi  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev env

from otel_ort._util.forking import renew_locks_in_child

DEFAULT_LIBRARY = "libpfm.so.4"
INSTALL_HINT = "apt install libpfm4 on Debian/Ubuntu, dnf install libpfm on Fedora"

_PFM_SUCCESS = 0
_PFM_PLM3 = 0x08  # user level only: unprivileged perf_event_open needs exclude_kernel
_PFM_OS_PERF_EVENT_EXT = 2
_ENCODE_ARG_SIZE = 40  # PFM_PERF_ENCODE_ABI0 on LP64, checked by the library
_ATTR_SIZE = 136  # PERF_ATTR_SIZE_VER8
_FLAGS_OFFSET = 40  # perf_event_attr's bit field
_UNAPPLIED = (
    (1 << 4, "user mode excluded (:k)"),  # exclude_user
    (3 << 15, "a precise level (:p, :precise)"),  # precise_ip
)

_ffi = cffi.FFI()
_ffi.cdef(
    """
    typedef struct {
        void *attr;    /* struct perf_event_attr *: in/out */
        char **fstr;   /* out: fully qualified event string; NULL = not wanted */
        size_t size;   /* sizeof this struct */
        int idx;
        int cpu;
        int flags;
        int pad0;
    } pfm_perf_encode_arg_t;
    int pfm_initialize(void);
    const char *pfm_strerror(int code);
    int pfm_get_os_event_encoding(const char *str, int dfl_plm, int os, void *arg);
    """
)


class PfmUnavailableError(RuntimeError):
    """libpfm4 cannot be used here; the message says why and how to fix it."""


class PfmEventError(LookupError):
    """libpfm4 cannot encode an event name; the message is libpfm4's reason."""


@dataclass(frozen=True)
class Encoding:
    """The ``perf_event_attr`` fields that identify an event."""

    type: int
    config: int
    config1: int = 0
    config2: int = 0
    unapplied: tuple[str, ...] = ()
    """What libpfm4 also encoded (from a modifier) that otel-ort does not apply."""


class Libpfm:
    """One loaded and initialised libpfm4."""

    def __init__(self, library: str) -> None:
        try:
            self._lib: Any = _ffi.dlopen(library)
            rc = int(self._lib.pfm_initialize())
        except OSError as exc:
            raise PfmUnavailableError(
                f"libpfm4 is not installed ({INSTALL_HINT}): cannot load {library!r}"
            ) from exc
        except AttributeError as exc:
            raise PfmUnavailableError(f"{library!r} is not libpfm4: {exc}") from exc
        if rc != _PFM_SUCCESS:
            raise PfmUnavailableError(f"libpfm4 failed to initialise: {self._strerror(rc)}")
        self.library = library
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")

    def _strerror(self, rc: int) -> str:
        return str(_ffi.string(self._lib.pfm_strerror(rc)).decode(errors="replace"))

    def encode(self, name: str) -> Encoding:
        """Encode ``name`` for perf_event at user level; raise :class:`PfmEventError` if unknown."""
        attr = _ffi.new(f"uint8_t[{_ATTR_SIZE}]")
        arg = _ffi.new("pfm_perf_encode_arg_t *", {"attr": attr, "size": _ENCODE_ARG_SIZE})
        with self._lock:
            rc = int(
                self._lib.pfm_get_os_event_encoding(
                    name.encode(), _PFM_PLM3, _PFM_OS_PERF_EVENT_EXT, arg
                )
            )
        if rc != _PFM_SUCCESS:
            raise PfmEventError(self._strerror(rc))
        raw = bytes(_ffi.buffer(attr))
        type_, _size, config = struct.unpack_from("=IIQ", raw, 0)
        config1, config2 = struct.unpack_from("=QQ", raw, 56)
        flags = struct.unpack_from("=Q", raw, _FLAGS_OFFSET)[0]
        unapplied = tuple(what for bit, what in _UNAPPLIED if flags & bit)
        return Encoding(type_, config, config1, config2, unapplied)


_loaded: dict[str, Libpfm | PfmUnavailableError] = {}
_load_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_load_lock")


def load(library: str = DEFAULT_LIBRARY) -> Libpfm:
    """Open and initialise ``library`` once; raise :class:`PfmUnavailableError` if impossible."""
    with _load_lock:
        if library not in _loaded:
            try:
                _loaded[library] = Libpfm(library)
            except PfmUnavailableError as exc:
                _loaded[library] = exc
        result = _loaded[library]
    if isinstance(result, PfmUnavailableError):
        raise PfmUnavailableError(str(result))
    return result
