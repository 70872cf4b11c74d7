"""Loaded at interpreter start by a bench server whose ``PYTHONPATH`` begins with this folder
(``bench.service_load --leave-out``): leaves one part of each profiled run's work out, by
replacing an otel-ort internal, so that a benchmark can price that part. Never used outside
the benchmarks.

``OTEL_ORT_BENCH_LEAVE_OUT`` names the part (``bench.leave_out.PARTS`` says what each is);
``nothing`` leaves nothing out, with the same modules imported as early. Python goes on after
an error in a ``sitecustomize``, so any error here ends the process instead: a server that
silently left nothing out would make the bench compare two equal servers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from typing import Any


def _replace(owner: Any, name: str, replacement: Any) -> None:
    """``owner.name`` becomes ``replacement``; an ``AttributeError`` if there is none to
    replace (renamed in otel-ort: this hook needs updating)."""
    getattr(owner, name)
    setattr(owner, name, replacement)


def _leave_out(part: str) -> None:
    from otel_ort.export.delivery import SpanDelivery
    from otel_ort.instrumentation import wrappers
    from otel_ort.perf.counting import RawRun
    from otel_ort.profiling import conversion, conversion_job, conversion_process, prerequisites
    from otel_ort.profiling.run_options import Unrecognized, run_profiling_switch
    from otel_ort.profiling.store import remove_files

    def convert(self: Any, store: Any, span: Any, end_ns: int, run: Any, *_: Any) -> None:
        self._count("profiled", 1)
        if isinstance(run.counters, RawRun):
            run.counters.settle()  # what the pool's next run would otherwise wait for
        remove_files(store.written(run.files))
        conversion.end_span(span, end_ns, "")

    class NotSwitched:
        """A switch that leaves a run's options as they are (ORT does not profile it)."""

        def enable(self, options: Any, prefix: str) -> None:
            pass

    def unswitched() -> Any:
        """The process's switch, found as otel-ort finds it (so that an ORT whose switch is
        not recognised still skips its runs, as outside the bench), but switching nothing
        on."""
        found = run_profiling_switch()
        return found if isinstance(found, Unrecognized) else NotSwitched()

    replacements: dict[str, list[tuple[Any, str, Any]]] = {
        "nothing": [],
        "conversion": [(conversion.Converter, "convert", convert)],
        "delivery": [
            (SpanDelivery, "deliver_drafts", lambda self, drafts: 0),
            (SpanDelivery, "deliver_encoded", lambda self, *args: 0),
        ],
        "ort-profiling": [
            (conversion.Converter, "convert", convert),
            (prerequisites, "run_profiling_switch", unswitched),
        ],
        "profiled-run": [(wrappers, "prepared", lambda *args: None)],
        "kept-file": [
            (conversion_job, "publish_kept", _no_kept_file),  # on the worker
            (conversion_process, "subprocess", _HookedSubprocess()),  # and in the process
        ],
        "perf-work": [(conversion.Converter, "_perf_counts", lambda self, *args: None)],
    }
    if part not in replacements:
        raise ValueError(f"OTEL_ORT_BENCH_LEAVE_OUT: unknown part {part!r}")
    for owner, name, replacement in replacements[part]:
        _replace(owner, name, replacement)


def _no_kept_file(data: bytes, path: str) -> None:
    """``publish_kept`` that writes nothing (and so leaves nothing to retain)."""


_IN_CONVERSION_PROCESS = "OTEL_ORT_BENCH_IN_CONVERSION_PROCESS"
"""Set in the environment of a conversion process that this hook follows there."""


class _HookedSubprocess:
    """``subprocess`` as otel-ort's conversion process module sees it: the process it starts
    (without ``PYTHONPATH``, so without this hook) gets this hook back, marked, so that the
    part that runs there (``kept-file``: writing the kept file) is left out there too."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: Any, **kwargs: Any) -> Any:
        env = dict(kwargs.get("env") or os.environ)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # this server's: this hook's folder first
        env[_IN_CONVERSION_PROCESS] = "1"
        return subprocess.Popen(args, **{**kwargs, "env": env})


def _leave_out_in_conversion_process(part: str) -> None:
    """In the conversion process: only what runs there."""
    if part == "kept-file":
        from otel_ort.profiling import conversion_job

        _replace(conversion_job, "publish_kept", _no_kept_file)


if os.environ.get("OTEL_ORT_BENCH_LEAVE_OUT"):
    try:
        if os.environ.get(_IN_CONVERSION_PROCESS):
            _leave_out_in_conversion_process(os.environ["OTEL_ORT_BENCH_LEAVE_OUT"])
        else:
            _leave_out(os.environ["OTEL_ORT_BENCH_LEAVE_OUT"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(2)
