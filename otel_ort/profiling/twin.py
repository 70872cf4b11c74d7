"""The twin of a user's session: the same model and options, opened through ORT's C API, where a
single run can be profiled.

ORT's Python options cannot be listed: config entries, free-dimension overrides and the like
are write-only, so :mod:`otel_ort.profiling.recorded_options` records those calls, and the
twin gets what was recorded for the options its session was created with. Calls made before
``instrument()`` cannot be seen; the twin then runs with ORT's defaults for them. Options the
twin cannot reproduce (initializers added from Python, custom-op libraries, plugin EPs, LoRA
adapters, providers other than CUDA and CPU, CUDA graphs), and models with random operators,
make the session's runs unprofilable, with the reason on their spans.

Config entries that make ORT write files (EP context models, saved optimized models) are not
copied: the twin must not overwrite the user's files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_ort.capi import CSession, SessionConfig
from otel_ort.perf.counting import Pool
from otel_ort.profiling.model_ops import UnreadableModel, random_ops
from otel_ort.profiling.recorded_options import (
    created_while_recording,
    model_file,
    recorded_calls,
    session_calls,
)

_NOT_REPRODUCIBLE = {
    "add_initializer": "initializers added with SessionOptions.add_initializer",
    "add_external_initializers": "initializers added with add_external_initializers",
    "add_external_initializers_from_files_in_memory": "in-memory external initializer files",
    "register_custom_ops_library": "a custom-op library",
    "add_provider": "an execution provider added with SessionOptions.add_provider",
    "add_provider_for_devices": "a plugin execution provider",
    "set_provider_selection_policy": "an EP selection policy",
    "set_provider_selection_policy_delegate": "an EP selection policy",
    "add_active_adapter": "a LoRA adapter",
}
_FILE_WRITING_KEYS = ("ep.context_", "session.save_", "session.optimized_model_")
_TWIN_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")
"""CUDA twins get the session's CUDA options as ORT reports them (``get_provider_options``),
its external allocator (``gpu_external_*``) included, but for ``_OWN_STREAM``."""
_OWN_STREAM = ("user_compute_stream", "has_user_compute_stream")
"""A twin's inputs and outputs are in host memory: it needs none of the user's CUDA streams,
which the user may destroy while the twin lives, so it runs on a stream of its own."""
_DEFAULT_TWIN_LOG_SEVERITY = 3
"""ERROR: the user's session already logs ORT's warnings once; the twin would repeat them."""


class TwinUnavailable(Exception):
    """The session cannot have a twin; the message says why (it goes on run spans)."""


def twin_config(session: Any) -> SessionConfig:
    """The C-API session config reproducing ``session``; ``TwinUnavailable`` if impossible
    (the cheap refusals first: the model's own checks read the whole file)."""
    live = session.get_session_options()
    config_entries: dict[str, str] = {}
    by_name: dict[str, int] = {}
    by_denotation: dict[str, int] = {}
    if getattr(session, "_read_config_from_model", False):
        raise TwinUnavailable("the session reads its options from the model file")
    calls, problem = session_calls(session)
    if problem:
        raise TwinUnavailable(problem)
    for method, args in calls:
        if method in _NOT_REPRODUCIBLE:
            raise TwinUnavailable(f"the session uses {_NOT_REPRODUCIBLE[method]}")
        if method == "add_session_config_entry":
            if not str(args[0]).startswith(_FILE_WRITING_KEYS):
                config_entries[str(args[0])] = str(args[1])
        elif method == "add_free_dimension_override_by_name":
            by_name[str(args[0])] = int(args[1])
        elif method == "add_free_dimension_override_by_denotation":
            by_denotation[str(args[0])] = int(args[1])
    severity = int(live.log_severity_level)
    return SessionConfig(
        model=_twin_model(session),
        intra_op_num_threads=int(live.intra_op_num_threads),
        inter_op_num_threads=int(live.inter_op_num_threads),
        graph_optimization_level=int(live.graph_optimization_level),
        execution_mode=int(live.execution_mode),
        enable_mem_pattern=bool(live.enable_mem_pattern),
        enable_cpu_mem_arena=bool(live.enable_cpu_mem_arena),
        use_deterministic_compute=bool(live.use_deterministic_compute),
        log_severity_level=severity if severity >= 0 else _DEFAULT_TWIN_LOG_SEVERITY,
        config_entries=config_entries,
        free_dimension_overrides_by_name=by_name,
        free_dimension_overrides_by_denotation=by_denotation,
        providers=_providers(session),
    )


def _twin_model(session: Any) -> str | bytes:
    """The model a twin of ``session`` loads: its file (unchanged since the session read
    it) or its bytes, without random operators."""
    model: str | bytes
    from_file = model_file(session)
    if from_file is not None:
        model, check = from_file
        problem = check()
        if problem:
            raise TwinUnavailable(problem)
    elif getattr(session, "_model_bytes", None):
        model = bytes(session._model_bytes)
    else:
        raise TwinUnavailable("the session's model path or bytes are not known")
    try:
        randoms = random_ops(model)
    except (OSError, UnreadableModel) as exc:
        raise TwinUnavailable(
            f"its model could not be checked for random operators: {exc}"
        ) from None
    if randoms:
        raise TwinUnavailable(
            f"the model has random operators ({', '.join(randoms)}): a twin, a second copy of "
            "ORT with its own random state, would not return the session's numbers"
        )
    return model


def _providers(session: Any) -> tuple[tuple[str, Mapping[str, str]], ...]:
    options = session.get_provider_options()
    providers = []
    for name in session.get_providers():
        if name not in _TWIN_PROVIDERS:
            raise TwinUnavailable(
                f"the session uses {name}; twins support {', '.join(_TWIN_PROVIDERS)} only"
            )
        values = options.get(name, {}) if name != "CPUExecutionProvider" else {}
        if values.get("enable_cuda_graph", "0") != "0":
            raise TwinUnavailable(
                "the session replays CUDA graphs: a replayed run executes no node to profile"
            )
        providers.append(
            (name, {str(k): str(v) for k, v in values.items() if k not in _OWN_STREAM})
        )
    return tuple(providers)


def required_inputs(session: Any) -> frozenset[str]:
    """The inputs ``InferenceSession.run`` refuses to go without: all but optional ones."""
    return frozenset(i.name for i in session.get_inputs() if not i.type.startswith("optional"))


def run_options_arguments(run_options: Any) -> dict[str, Any]:
    """``CSession.run`` keyword arguments reproducing a Python ``RunOptions`` (or ``None``),
    but its ``terminate`` flag (``following_terminate``)."""
    if run_options is None:
        return {}
    if run_options.only_execute_path_to_fetches:
        raise TwinUnavailable(
            "its RunOptions sets only_execute_path_to_fetches, which ORT's C API cannot set"
        )
    arguments: dict[str, Any] = {}
    if run_options.logid:
        arguments["run_tag"] = str(run_options.logid)
    if run_options.log_severity_level >= 0:
        arguments["log_severity_level"] = int(run_options.log_severity_level)
    calls = recorded_calls(run_options)
    if not created_while_recording(calls):
        raise TwinUnavailable("its RunOptions was created before instrument()")
    entries: dict[str, str] = {}
    for method, args in calls[1:]:
        if method in _NOT_REPRODUCIBLE:
            raise TwinUnavailable(f"the run uses {_NOT_REPRODUCIBLE[method]}")
        entries[str(args[0])] = str(args[1])
    if entries:
        arguments["run_config_entries"] = entries
    return arguments


@dataclass(eq=False)
class Twin:
    """One session's twin and where it stands: ``building`` → ``ready`` or ``failed``, and
    ``closed`` at the end; ``unprimed`` (built, ORT refused the inputs it was to be primed
    with) → ``building`` again with another run's. ``close`` waits for runs in flight on it
    (``CSession.close``)."""

    owner: Callable[[], object]
    """A weak reference to the profiler that built it: another one (after re-instrumenting)
    builds its own, and this one is not kept alive by the sessions it profiled."""
    providers_list: object
    """The session's ``_providers`` list when it was built: ORT rebuilding the session (EP
    fallback, ``set_providers``) makes a new list, and the twin is rebuilt to match."""
    attempts: int = 1
    """Which attempt at a twin for this session this is (of this profiler, in this process)."""
    pid: int = field(default_factory=os.getpid)
    state: str = "building"
    reason: str = ""
    session: CSession | None = None
    pool: Pool | None = None
    """perf groups on the twin's intra-op threads, when perf counters are on."""
    serves_unprofiled: bool = False
    """Whether it may run unprofiled runs (all it can in serve mode, warm-ups in twin mode):
    not for a session profiling itself, nor once an output could not be converted."""
    required_inputs: frozenset[str] = frozenset()
    """The session's inputs that ORT's Python API insists on (the C API does not check)."""
    _unprimed: CSession | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def matches(self, owner: object, session: Any) -> bool:
        """Whether this twin still stands for ``session`` under ``owner``."""
        return (
            self.owner() is owner
            and self.pid == os.getpid()
            and self.providers_list is getattr(session, "_providers", None)
        )

    def ready(
        self,
        csession: CSession,
        pool: Pool | None,
        *,
        serves_unprofiled: bool,
        required_inputs: frozenset[str],
    ) -> bool:
        """Start serving ``csession`` (``pool``: perf groups on its threads); ``False`` (and
        both closed) if already closed."""
        with self._lock:
            if self.state != "closed":
                self.serves_unprofiled = serves_unprofiled
                self.required_inputs = required_inputs
                self.session, self.pool, self.state, self.reason = csession, pool, "ready", ""
                return True
        csession.close()
        if pool is not None:
            pool.close()
        return False

    def unprimed(
        self, csession: CSession, reason: str, serves: bool, required: frozenset[str]
    ) -> None:
        """Keep the built ``csession`` until a run brings inputs to prime it with (closed
        instead if the twin was closed meanwhile); what it will serve, as for ``ready``."""
        with self._lock:
            if self.state != "closed":
                self.state, self.reason, self._unprimed = "unprimed", reason, csession
                self.serves_unprofiled, self.required_inputs = serves, required
                return
        csession.close()

    def take_unprimed(self) -> CSession | None:
        """The unprimed session, to prime now (``building`` again); ``None`` if not unprimed."""
        with self._lock:
            csession, self._unprimed = self._unprimed, None
            if csession is not None:
                self.state = "building"
            return csession

    def fail(self, reason: str) -> None:
        with self._lock:
            if self.state != "closed":
                self.state, self.reason = "failed", reason

    def has_required(self, feeds: Mapping[str, Any]) -> bool:
        """Whether ``feeds`` has every input ORT's Python API requires (else it raises)."""
        return feeds.keys() >= self.required_inputs

    def run(
        self, feeds: Mapping[str, Any], output_names: Any, **arguments: Any
    ) -> tuple[list[Any], int]:
        """``CSession.run`` on the twin: its outputs, and when it called ORT (ns since the
        epoch); ``RuntimeError`` if it is not ready, or closes meanwhile."""
        csession = self.session  # no lock: runs must not queue behind each other
        if csession is None:
            raise RuntimeError(f"the twin is {self.state}")
        outputs = csession.run(feeds, output_names, **arguments)
        return outputs, csession.last_run_started_ns()

    def close(self, timeout: float | None = None) -> bool:
        """Release the C-API session once no run is in flight on it; ``False`` if runs were
        still in flight after ``timeout`` seconds: the session and the perf groups then go
        when the last of those runs drops them. In a forked child the parent's twin is
        abandoned, not released: its ORT threads do not exist there, and releasing would wait
        for them (nor is its lock touched: a parent's thread may have held it at the fork)."""
        if self.pid != os.getpid():
            for csession in (self.session, self._unprimed):
                if csession is not None:
                    csession.abandon()
            if self.pool is not None:
                self.pool.close(forked_child=True)  # our copies of the parent's fds
            self.session = self._unprimed = self.pool = None
            self.state = "closed"
            return True
        with self._lock:
            csession, self.session, self.state = self.session, None, "closed"
            pool, self.pool = self.pool, None
            unprimed, self._unprimed = self._unprimed, None
        if unprimed is not None:  # no run uses it
            unprimed.close()
        released = csession is None or csession.close(timeout)  # once runs in flight return
        if pool is not None and released:  # else a profiled run may hold its lock: left to GC
            pool.close()
        return released
