"""A FastAPI inference service instrumented with otel-ort (see ``examples/README.md``).

    pip install uvicorn && uvicorn examples.fastapi_service.app:app

``POST /predict`` with ``{"inputs": [[...], ...]}`` returns ``{"outputs": [[...], ...]}``.
Every request is a trace: FastAPI's server span, and under it the request's
``onnxruntime.run`` span. A request with ``X-Profile: 1`` (or ``?profile=1``, or the W3C
baggage entry ``onnxruntime.profile=1`` from upstream) has its run profiled: a span per graph
node under the run span, and the run's Chrome-trace JSON on disk.

Settings (environment):

- ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the other ``OTEL_*`` variables: where spans and metrics
  go (default: OTLP/gRPC on localhost:4317, the docker-compose collector). The service sets up
  its own export with ``otel_ort.configure()``: run it as is, not under
  ``opentelemetry-instrument``.
- ``OTEL_ORT_PROFILE_SAMPLER``: which other runs are profiled (default ``rate:1/s``; ``never``
  profiles only on demand). ``OTEL_ORT_PROFILE_DIR``: where each profiled run's Chrome-trace
  JSON is kept (default ``~/.cache/otel-ort/profiles``).
- ``ORT_SERVICE_MODEL``: the ONNX model to serve, with one float32 input ``[batch, features]``
  (default: otel-ort's demo MLP, built once into ``~/.cache/otel-ort/models/``).
- ``ORT_SERVICE_SPINNING``: ``0`` (the default) turns ORT's intra-op threads' spin-waiting for
  work off (``session.intra_op.allow_spinning=0``): the service's concurrent requests on a few
  shared cores would otherwise lose CPU to each other's spinning threads
  (``docs/decisions.md``). ``1`` leaves ORT's default, spinning.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Annotated

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, Header, HTTPException, Query
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from pydantic import BaseModel

import otel_ort
from otel_ort import OrtInstrumentor, profile_next_run

SPINNING = os.environ.get("ORT_SERVICE_SPINNING") or "0"
if SPINNING not in ("0", "1"):
    raise SystemExit(
        f"ORT_SERVICE_SPINNING={SPINNING!r}: set 0 (ORT's threads do not spin, the default) "
        "or 1 (ORT's default, spinning)"
    )

# OpenTelemetry first, so that the session created at startup is already instrumented.
telemetry = otel_ort.configure(service_name=os.environ.get("OTEL_SERVICE_NAME") or "ort-service")
OrtInstrumentor().instrument(
    profile_sampler=os.environ.get("OTEL_ORT_PROFILE_SAMPLER") or "rate:1/s"
)
tracer = trace.get_tracer("ort-service")


def model_path() -> Path:
    """``$ORT_SERVICE_MODEL``, else the demo MLP, written once into the user's cache."""
    configured = os.environ.get("ORT_SERVICE_MODEL")
    if configured:
        return Path(configured)
    from otel_ort.demo_model import mlp_model

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = cache / "otel-ort" / "models" / "mlp_256x4.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(mlp_model(width=256, depth=4))
        partial.replace(path)  # atomic: workers starting together never read half a model
    return path


class Model:
    """The one session of the process, opened at startup."""

    session: ort.InferenceSession
    input_name: str


model = Model()


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # Start-up exports nothing and flushes nothing: it never waits on the collector.
    with tracer.start_as_current_span("startup"):  # one trace: the model load
        options = ort.SessionOptions()
        if SPINNING == "0":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model.session = ort.InferenceSession(
            model_path(), options, providers=["CPUExecutionProvider"]
        )
        model.input_name = model.session.get_inputs()[0].name
    yield
    # Shut telemetry down here, not at interpreter exit: on SIGTERM, uvicorn (and gunicorn's
    # uvicorn workers) end the process with the signal's default handler after this, so no
    # atexit handler runs. This converts pending profiles, then exports every span and metric
    # (30 s at most; a collector found down is not retried). In a thread: the loop stays free.
    await asyncio.to_thread(telemetry.shutdown)


app = FastAPI(title="ort-service", lifespan=lifespan)
FastAPIInstrumentor.instrument_app(app)


class PredictRequest(BaseModel):
    inputs: list[list[float]]
    """Rows of the model's input: ``[batch, features]``."""


class PredictResponse(BaseModel):
    outputs: list[list[float]]
    """The model's first output, one row per input row."""


# A plain ``def``: FastAPI runs it in its thread pool, in the request's context, so the run
# span is a child of the request's server span and ``profile_next_run()`` applies to it.
@app.post("/predict")
def predict(
    request: PredictRequest,
    x_profile: Annotated[str | None, Header()] = None,
    profile: Annotated[bool, Query()] = False,
) -> PredictResponse:
    """Run the model on ``inputs``. ``X-Profile: 1`` or ``?profile=1`` profiles this run, as
    does the W3C baggage entry ``onnxruntime.profile=1`` set by an upstream service."""
    try:
        batch = np.asarray(request.inputs, dtype=np.float32)
    except ValueError as exc:  # rows of different lengths
        raise HTTPException(status_code=422, detail=str(exc)) from None
    on_demand = profile or x_profile == "1"
    with profile_next_run() if on_demand else nullcontext():
        try:
            outputs = model.session.run(None, {model.input_name: batch})
        except InvalidArgument as exc:  # wrong shape
            raise HTTPException(status_code=422, detail=str(exc)) from None
    return PredictResponse(outputs=np.asarray(outputs[0]).tolist())
