"""What every profiled run needs, each found once: the run-profiling switch (on the first
selected run) and the profile store (the default one made on the first profiled run); or why
no run can be profiled here (no switch, no profile directory, profiling shut down)."""

from __future__ import annotations

import logging
import threading

from otel_ort.instrumentation.options import ProfilingOptions
from otel_ort.profiling.run_options import RunProfilingSwitch, Unrecognized, run_profiling_switch
from otel_ort.profiling.store import ProfileDirError, ProfileStore, default_profile_dir

_logger = logging.getLogger("otel_ort")

SHUT_DOWN = "otel-ort's profiling was shut down"


class Prerequisites:
    """The switch and the store of one ``instrument()``'s profiling, each found once; why
    profiling is unavailable, once known."""

    def __init__(self, options: ProfilingOptions) -> None:
        self._options = options
        self.store: ProfileStore | None = None
        """The profile store, once made (a profiled run had one)."""
        if options.directory is not None:  # checked by the options; the default: later
            self.store = ProfileStore(options.directory, options.max_files, options.max_bytes)
        self.switch: RunProfilingSwitch | Unrecognized | None = None
        """The run-profiling switch, once found for good."""
        self.shut_down = False
        self.found: tuple[RunProfilingSwitch, ProfileStore] | None = None
        """The switch and the store once both are found, until profiling is shut down: what
        a selected run's check reads (one attribute, on a path that runs on cold caches)."""
        self._unavailable = ""  # why profiling cannot work at all here, once known
        self._switch_lock = threading.Lock()
        self._lock = threading.Lock()

    def unavailable(self) -> str:
        """Why no run can be profiled now (``""``: none known)."""
        return self._unavailable or (SHUT_DOWN if self.shut_down else "")

    def shut(self) -> bool:
        """Mark profiling shut down; ``False`` if it already was."""
        with self._lock:
            if self.shut_down:
                return False
            self.shut_down = True
            self.found = None
            return True

    def note_found(self, switch: RunProfilingSwitch, store: ProfileStore) -> None:
        """Both were found: later checks read ``found`` (unless profiling was shut down)."""
        with self._lock:
            if not self.shut_down:
                self.found = (switch, store)

    def ready_switch(self) -> RunProfilingSwitch | Unrecognized:
        """The run-profiling switch, found on the first selected run (again on a later one
        while the probe could not run)."""
        switch = self.switch
        if switch is None:
            with self._switch_lock:
                switch = self.switch
                if switch is None:
                    switch = run_profiling_switch()
                    if isinstance(switch, Unrecognized) and switch.transient:
                        return switch
                    self.switch = switch
                    if isinstance(switch, Unrecognized):
                        _logger.warning(
                            "otel-ort: runs cannot be profiled: run-level profiling cannot be "
                            "set on this RunOptions (%s); please report it with your "
                            "onnxruntime version",
                            switch.reason,
                        )
        return switch

    def ready_store(self) -> ProfileStore | str:
        """The profile store (the default one is made on the first profiled run), or why
        there is none."""
        if self.store is None:
            with self._lock:
                if self.store is None and not self._unavailable:
                    try:
                        self.store = ProfileStore(
                            default_profile_dir(),
                            self._options.max_files,
                            self._options.max_bytes,
                        )
                    except (ProfileDirError, OSError) as exc:
                        self._unavailable = (
                            f"profile_dir: {exc}" if isinstance(exc, ProfileDirError) else str(exc)
                        )
                        _logger.warning("otel-ort: runs cannot be profiled: %s", self._unavailable)
        return self.store or self._unavailable

    def after_fork_in_child(self) -> None:
        self._switch_lock = threading.Lock()
        self._lock = threading.Lock()
        if self.store is not None:
            self.store.after_fork_in_child()
