"""What otel-ort knows about an ``InferenceSession``, computed once per session.

The facts are cached in the session's ``__dict__`` and recomputed only when ORT re-creates
the underlying C++ session (``set_providers`` or the EP fallback), which it marks by building
a new ``_providers`` list: the cache keeps that list and compares by identity, one pointer
compare per run. The session id survives such a rebuild.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort._util.forking import renew_locks_in_child
from otel_ort._util.text_limits import clip
from otel_ort.failures import report_failure

FACTS_ATTR = "_otel_ort_facts"
"""Where a session's facts are cached, in its ``__dict__``."""
_SESSION_IDS = itertools.count(1)
_PROCESS_TAG = uuid.uuid4().hex[:8]
_collect_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_collect_lock")


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """Attributes shared by every span and measurement of one session."""

    providers_list: object
    """ORT's ``_providers`` list when the facts were taken; a new list means a new C++ session."""
    session_id: str
    run_attributes: Mapping[str, AttributeValue]
    """For every run span of the session."""
    metric_attributes: Mapping[str, AttributeValue]
    """For the run-duration histogram (low cardinality)."""


UNKNOWN_SESSION = SessionFacts(
    None,
    "unknown",
    {semconv.MODEL_PATH: "unknown", semconv.RUN_PROFILED: False},
    {semconv.MODEL_PATH: "unknown", semconv.RUN_PROFILED: False},
)
"""Stand-in for a session otel-ort failed to describe."""


def facts_for(session: Any) -> SessionFacts:
    """Return the cached facts of ``session``, computing them on first use."""
    facts: SessionFacts | None = session.__dict__.get(FACTS_ATTR)
    if facts is None or facts.providers_list is not getattr(session, "_providers", None):
        # outside the lock: hashing a large in-memory model would hold up other sessions
        model = str(facts.run_attributes[semconv.MODEL_PATH]) if facts else model_label(session)
        with _collect_lock:  # concurrent first runs must agree on one session id
            facts = session.__dict__.get(FACTS_ATTR)
            if facts is None or facts.providers_list is not getattr(session, "_providers", None):
                facts = _collect(session, facts, model)
                session.__dict__[FACTS_ATTR] = facts
    return facts


def model_label(session: Any) -> str:
    """The model's path as given to ORT, or ``bytes:sha256:<16 hex>`` for in-memory models.

    The hash covers the whole serialized model, so the label is stable across processes
    and hosts; it costs about 2 ms per MB, once per session.
    """
    path = getattr(session, "_model_path", None)
    if path:
        return clip(str(path))
    data = getattr(session, "_model_bytes", None)
    if isinstance(data, bytes | bytearray | memoryview):
        digest = hashlib.sha256(data, usedforsecurity=False).hexdigest()[:16]
        return f"bytes:sha256:{digest}"
    return "unknown"


def session_span_attributes(session: Any, facts: SessionFacts) -> dict[str, AttributeValue]:
    """The run attributes plus the session options and ORT version, for the session span."""
    import onnxruntime

    attributes = {
        key: value for key, value in facts.run_attributes.items() if key != semconv.RUN_PROFILED
    }
    attributes[semconv.ONNXRUNTIME_VERSION] = onnxruntime.__version__
    try:
        options = session.get_session_options()
        attributes[semconv.SESSION_GRAPH_OPTIMIZATION_LEVEL] = options.graph_optimization_level.name
        attributes[semconv.SESSION_EXECUTION_MODE] = options.execution_mode.name
        attributes[semconv.SESSION_INTRA_OP_NUM_THREADS] = int(options.intra_op_num_threads)
        attributes[semconv.SESSION_INTER_OP_NUM_THREADS] = int(options.inter_op_num_threads)
    except Exception:
        report_failure("could not read the session options")
    return attributes


def _collect(session: Any, previous: SessionFacts | None, model: str) -> SessionFacts:
    providers = tuple(str(p) for p in session.get_providers())
    session_id = (
        previous.session_id
        if previous is not None
        else f"{_PROCESS_TAG}-{os.getpid()}-{next(_SESSION_IDS)}"
    )
    run: dict[str, AttributeValue] = {
        semconv.MODEL_PATH: model,
        semconv.SESSION_PROVIDERS: providers,
        semconv.SESSION_ID: session_id,
    }
    try:
        meta = session.get_modelmeta()
        run[semconv.MODEL_GRAPH_NAME] = clip(str(meta.graph_name))
        if meta.producer_name:
            run[semconv.MODEL_PRODUCER] = clip(str(meta.producer_name))
    except Exception:  # a session ORT cannot describe still gets its spans
        report_failure("could not read the model metadata")
    run[semconv.RUN_PROFILED] = False
    metric: dict[str, AttributeValue] = {
        semconv.MODEL_PATH: model,
        semconv.SESSION_PROVIDER: providers[0] if providers else "unknown",
        semconv.RUN_PROFILED: False,
    }
    return SessionFacts(getattr(session, "_providers", None), session_id, run, metric)
