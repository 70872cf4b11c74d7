"""Loaded at interpreter start by a bench server whose ``PYTHONPATH`` begins with this folder
(``bench.service_load --leave-out``): leaves one part of each profiled run's work out, by
replacing an otel-ort internal, so that a benchmark can price that part. Never used outside
the benchmarks.

``OTEL_ORT_BENCH_LEAVE_OUT`` names the part (``bench.leave_out.PARTS`` says what each is);
``nothing`` leaves nothing out, with the same modules imported as early.
"""

from __future__ import annotations

import os
from typing import Any


def _leave_out(part: str) -> None:
    from otel_ort.export.delivery import SpanDelivery
    from otel_ort.perf.counting import RawRun
    from otel_ort.profiling import conversion
    from otel_ort.profiling.store import remove_files

    if part == "nothing":  # the baseline: the same modules imported as early
        return
    if part == "conversion":

        def convert(self: Any, store: Any, span: Any, end_ns: int, run: Any, *_: Any) -> None:
            self._count("profiled", 1)
            if isinstance(run.counters, RawRun):
                run.counters.settle()  # what the pool's next run would otherwise wait for
            remove_files(store.written(run.files))
            conversion.end_span(span, end_ns, "")

        conversion.Converter.convert = convert  # type: ignore[method-assign,assignment]
    elif part == "delivery":
        SpanDelivery.deliver_drafts = lambda self, drafts: 0  # type: ignore[method-assign]
    elif part == "kept-file":
        conversion.Converter._publish = lambda self, *args: None  # type: ignore[method-assign]
    elif part == "perf-work":
        conversion.Converter._perf_counts = lambda self, *args: None  # type: ignore[method-assign]
    else:
        raise SystemExit(f"OTEL_ORT_BENCH_LEAVE_OUT: unknown part {part!r}")


if os.environ.get("OTEL_ORT_BENCH_LEAVE_OUT"):
    _leave_out(os.environ["OTEL_ORT_BENCH_LEAVE_OUT"])
