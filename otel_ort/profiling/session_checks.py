"""What refuses a selected run before anything is made for it: the caller's ``run_options``
(not a ``RunOptions``), or its session (it profiles itself, or replays CUDA graphs); and how
the session executes its nodes. A session's answers are read on its first selected run and
kept on it (read again once ORT has rebuilt it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxruntime import ExecutionMode, RunOptions

from otel_ort import semconv


@dataclass(frozen=True, slots=True)
class Skipped:
    """Why a selected run was not profiled: a skip reason (``semconv.SKIP_*``) and words."""

    reason: str
    detail: str


_FIXED_KEY = "_otel_ort_profiling_facts"


def caller_refusal(method: str, caller: Any) -> Skipped | None:
    """Why ORT's own run would refuse the caller's ``run_options`` (``caller``; ``None``:
    none given), if it would: then otel-ort does not profile the run, and ORT says so."""
    if isinstance(caller, RunOptions) or (caller is None and method != "run_with_ortvaluevector"):
        return None
    given = "None" if caller is None else f"a {type(caller).__name__}"
    return Skipped(semconv.SKIP_VALUE, f"run_options is {given}")


@dataclass(frozen=True, slots=True)
class _Fixed:
    """What profiling needs to know of a session that its runs do not change."""

    providers: object
    """The session's providers list when this was read: ORT replaces it when it rebuilds
    the session (its EP fallback)."""
    refusal: Skipped | None
    sequential: bool
    """The session executes its nodes one after the other, on the calling thread."""


def fixed_for(session: Any) -> _Fixed:
    """The session's ``_Fixed``, read on its first selected run (and again once ORT has
    rebuilt it)."""
    providers = getattr(session, "_providers", None)
    fixed = session.__dict__.get(_FIXED_KEY)
    if not isinstance(fixed, _Fixed) or fixed.providers is not providers:
        live = session.get_session_options()
        sequential = live.execution_mode == ExecutionMode.ORT_SEQUENTIAL
        fixed = _Fixed(providers, _unprofilable(session, live), sequential)
        session.__dict__[_FIXED_KEY] = fixed
    return fixed


def _unprofilable(session: Any, live: Any) -> Skipped | None:
    """Why no run of ``session`` (``live``: its options) can be profiled, if none can."""
    if live.enable_profiling:
        return Skipped(
            semconv.SKIP_SESSION_PROFILING,
            "the session profiles itself (SessionOptions.enable_profiling): ORT ignores "
            "run-level profiling then",
        )
    cuda = session.get_provider_options().get("CUDAExecutionProvider", {})
    if str(cuda.get("enable_cuda_graph", "0")).strip().lower() in ("1", "true"):
        return Skipped(
            semconv.SKIP_CUDA_GRAPH,
            "the session replays CUDA graphs (enable_cuda_graph): a replayed run executes no node",
        )
    return None
