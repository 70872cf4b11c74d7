"""Profiled runs against ORT's own: one case run both ways, and how the outputs differ."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from otel_ort import flush_profiles, profile_next_run, semconv
from tests.conftest import Telemetry, attrs


def difference(want: Any, got: Any, where: str = "outputs") -> str | None:
    """Where ``got`` differs from ``want`` in Python type, dtype, shape, strides or bytes."""
    if type(want) is not type(got):
        return f"{where}: {type(got).__name__}, ORT returns {type(want).__name__}"
    if isinstance(want, np.ndarray):
        if (want.dtype, want.shape) != (got.dtype, got.shape):
            return f"{where}: {got.dtype}{got.shape}, ORT returns {want.dtype}{want.shape}"
        if want.dtype == object:
            items = [(type(v), v) for v in want.ravel()], [(type(v), v) for v in got.ravel()]
            return None if items[0] == items[1] else f"{where}: objects differ"
        if want.size > 1 and want.strides != got.strides:
            return f"{where}: strides {got.strides}, ORT's {want.strides}"
        return None if want.tobytes() == got.tobytes() else f"{where}: bytes differ"
    if isinstance(want, list | dict):
        if len(want) != len(got) or (isinstance(want, dict) and list(want) != list(got)):
            return f"{where}: {len(got)} items or keys differ from ORT's {len(want)}"
        keys = list(want) if isinstance(want, dict) else range(len(want))
        found = (difference(want[k], got[k], f"{where}[{k!r}]") for k in keys)
        return next((d for d in found if d), None)
    return None if want == got else f"{where}: {got!r}, ORT returns {want!r}"


def check_case(telemetry: Telemetry, session: ort.InferenceSession, feeds: dict[str, Any]) -> str:
    """Run ``feeds`` plain, then profiled; what happened, and how the profiled run's outputs
    differ from ORT's."""
    try:
        want = session.run(None, feeds)
    except Exception as ort_error:
        with profile_next_run():
            try:
                session.run(None, feeds)
            except Exception as error:
                same = type(error) is type(ort_error) and str(error) == str(ort_error)
                return "ORT raises" if same else f"raises {error!r}, ORT {ort_error!r}"
        return f"differs: a profiled run returned where ORT raised {ort_error!r}"
    with profile_next_run():
        got = session.run(None, feeds)
    assert flush_profiles(timeout=60)
    run = attrs(telemetry.spans(semconv.SPAN_RUN)[-1])
    if not run[semconv.RUN_PROFILED]:
        return f"not profiled: {run.get(semconv.PROFILE_SKIP_DETAIL)}"
    found = difference(want, got)
    if found and any(difference(want, session.run(None, feeds)) is not None for _ in range(5)):
        # ORT's own runs differ from one another (random operators on CUDA; two of them may
        # still agree by chance): compare the outputs' types, dtypes and shapes only
        found = difference(_shapes(want), _shapes(got))
    return f"differs: {found}" if found else "profiled"


def _shapes(value: Any) -> Any:
    """``value`` with each array replaced by its dtype and shape."""
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape)
    if isinstance(value, list):
        return [_shapes(item) for item in value]
    if isinstance(value, dict):
        return {key: _shapes(item) for key, item in value.items()}
    return value
