"""What ``bench.service_load --leave-out`` can leave out of each profiled run's work, in a
server of its own (``sitecustomize.py`` here does it there)."""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
"""Put first on a server's ``PYTHONPATH``, with ``OTEL_ORT_BENCH_LEAVE_OUT`` set."""

PARTS = {
    "conversion": "the whole conversion (the worker's and the conversion process's): no "
    "profile read, no spans, no kept file "
    "(the run span still ends, the raw file is deleted; the session's node count stays at its "
    "first guess, so ORT's pool logs are cleared less often, a bias of about 0.01 % here)",
    "delivery": "handing the node and kernel spans to the span processors (so no export)",
    "kept-file": "writing the enriched Chrome JSON (and so retention; its bytes are still made)",
    "ort-profiling": "ORT's own profiling of the run (its run options are not switched on, so "
    "ORT neither profiles the run nor writes a file, and ORT's thread-pool profiler never "
    "starts) and with it the whole conversion, as ``conversion`` leaves it out; the run is "
    "still selected, prepared, counted by perf and handed to the worker",
    "profiled-run": "everything after the sampler's choice: the run it selects runs as an "
    "unprofiled one (no run options, no perf window, no hand-off); what is left is what "
    "asking the sampler costs every run",
    "perf-work": "the perf attribution (the worker's or the conversion process's), and with "
    "it the node spans' perf attributes, the kept file's counter tracks and the placing of "
    "node windows by the calling thread's switches (the counters still count)",
}

NO_CONVERSION = frozenset({"conversion", "ort-profiling", "profiled-run"})
"""The parts whose server converts no profile, in otel-ort's conversion process or on its
worker."""
