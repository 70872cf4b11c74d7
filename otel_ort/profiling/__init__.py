"""The profiling engine: which runs are profiled, how ORT's run-level profiling is switched on
for them on the user's own session, and the worker that turns each profile into spans and a
kept file (the profiles themselves are read by :mod:`otel_ort.profiles`)."""
