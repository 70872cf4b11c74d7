"""A batch job that profiles every k-th run of an ONNX model with otel-ort.

    python examples/batch_profile.py [model.onnx] [--batches 200] [--every 10]
        [--batch-size 8] [--profile-dir ./otel-ort-profiles] [--otlp-endpoint URL]

It runs ``--batches`` batches of seeded random inputs (built from the model's input
signature; a symbolic dimension is the batch size), profiles every ``--every``-th run, waits
for the profiles to be converted, and prints what it did and where each run's Chrome-trace
JSON is (open it in https://ui.perfetto.dev or Chrome DevTools' Performance panel). Without a
model it runs otel-ort's demo MLP (needs the ``onnx`` package).

Spans are exported only when an OTLP endpoint is configured (``--otlp-endpoint`` or the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``): the whole job is then one trace, with the node spans
of each profiled run under its ``onnxruntime.run`` span. Without an endpoint nothing is
exported (no collector to wait for), and the profile files are the output.

Stopped with SIGTERM (``kill``, a scheduler's stop), the job exits as on Ctrl+C: the spans
of the runs made so far, profiled runs included, are exported at exit, and it exits 143.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import onnxruntime as ort
from opentelemetry import trace

import otel_ort
from otel_ort import OrtInstrumentor
from otel_ort.profiles import chrome

DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.model and not Path(args.model).is_file():
        print(f"batch_profile: no model file {args.model!r}", file=sys.stderr)
        return 2
    endpoint = (
        args.otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    telemetry = None
    if endpoint:
        service = os.environ.get("OTEL_SERVICE_NAME") or "batch-profile"
        telemetry = otel_ort.configure(service_name=service, endpoint=args.otlp_endpoint)
    try:
        # creates a missing profile directory 0700; refuses one other users can read
        OrtInstrumentor().instrument(
            profile_sampler=f"every:{args.every}", profile_dir=args.profile_dir
        )
    except ValueError as exc:
        print(f"batch_profile: {exc}", file=sys.stderr)
        return 2
    directory = Path(args.profile_dir).resolve()

    with trace.get_tracer("batch-profile").start_as_current_span("batch-profile") as job:
        job.set_attributes({"batch.count": args.batches, "batch.size": args.batch_size})
        model: Any = args.model or demo_model()
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        try:
            feeds = FeedMaker(session, args.batch_size)
        except ValueError as exc:
            print(f"batch_profile: {exc}", file=sys.stderr)
            return 2
        progress = Progress(args.batches)
        for _ in range(args.batches):
            session.run(None, feeds.next())
            progress.step()
        progress.done()
        trace_id = job.get_span_context().trace_id
    print("waiting for the profiles to be converted...", file=sys.stderr)
    otel_ort.flush_profiles(timeout=300)

    # each profiled run keeps otel-ort_<time>_<pid>-<random>-<n>.json.gz: this process's are its own
    written = sorted(directory.glob(f"otel-ort_*_{os.getpid()}-*.json.gz"), key=os.path.getmtime)
    print_summary(args, directory, written)
    if telemetry is not None:
        telemetry.shutdown()  # export what is left before printing where it went
        print(f"\ntrace {trace_id:032x} sent to {telemetry.target}")
        print(f"  in Jaeger (make up): http://localhost:16686/trace/{trace_id:032x}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="ONNX model (default: otel-ort's demo MLP)")
    parser.add_argument("--batches", type=positive, default=200, help="runs (default 200)")
    parser.add_argument("--every", type=positive, default=10, help="profile every k-th run")
    parser.add_argument("--batch-size", type=positive, default=8, help="rows per batch")
    parser.add_argument(
        "--profile-dir",
        default="otel-ort-profiles",
        help="where each profiled run's Chrome JSON goes (default ./otel-ort-profiles, 0700)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        help="export spans over OTLP (default: $OTEL_EXPORTER_OTLP_ENDPOINT; none: no export)",
    )
    return parser.parse_args(argv)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def demo_model() -> bytes:
    from otel_ort.demo_model import mlp_model

    return mlp_model(width=256, depth=4)


class FeedMaker:
    """Seeded random inputs of the model's signature, a fresh batch each time."""

    def __init__(self, session: ort.InferenceSession, batch_size: int) -> None:
        self.rng = np.random.default_rng(0)
        self.inputs: list[tuple[str, tuple[int, ...], Any]] = []
        for arg in session.get_inputs():
            if arg.type not in DTYPES:
                raise ValueError(f"input {arg.name!r} is a {arg.type}, which this job cannot fill")
            batch_dim = True
            shape = []
            for dim in arg.shape:
                if isinstance(dim, int) and dim > 0:
                    shape.append(dim)
                else:  # symbolic: the first one is the batch, the others 1
                    shape.append(batch_size if batch_dim else 1)
                    batch_dim = False
            self.inputs.append((arg.name, tuple(shape), DTYPES[arg.type]))

    def next(self) -> dict[str, np.ndarray]:
        return {
            name: self.rng.standard_normal(shape).astype(dtype)
            for name, shape, dtype in self.inputs
        }


class Progress:
    """A progress line on stderr: redrawn on a terminal, every 10% otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def step(self) -> None:
        self.count += 1
        tenth = self.count * 10 // self.total
        if self.tty or tenth != self.shown:
            self.shown = tenth
            elapsed = time.monotonic() - self.started
            line = f"run {self.count}/{self.total} ({elapsed:.1f} s)"
            print(f"\r{line}" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def print_summary(args: argparse.Namespace, directory: Path, written: list[Path]) -> None:
    selected = args.batches // args.every
    kept = list(directory.glob("otel-ort_*.json.gz"))
    size = sum(path.stat().st_size for path in kept)
    rows = [
        ("runs", args.batches, f"batches of {args.batch_size}"),
        ("selected for profiling", selected, f"every {args.every}th run"),
        ("profiled runs", len(written), "this job's Chrome-trace JSON files"),
        ("profile files", len(kept), f"{megabytes(size)} kept in {directory}"),
    ]
    label_width = max(len(label) for label, _, _ in rows)
    count_width = max(len(str(count)) for _, count, _ in rows)
    print()
    for label, count, note in rows:
        print(f"{label:<{label_width}}  {count:>{count_width}}  {note}")
    if len(written) < selected:
        print(
            f"\n{selected - len(written)} selected run(s) have no file: not profiled (the run span"
            " says why in onnxruntime.profile.skip_reason) or deleted by retention"
            " (OTEL_ORT_PROFILE_MAX_FILES, OTEL_ORT_PROFILE_MAX_BYTES)"
        )
    if written:
        print(f"\nChrome-trace JSON ({chrome.VIEWERS}):")
        for path in written[:3]:
            print(f"  {path}")
        if len(written) > 3:
            print(f"  ... and {len(written) - 3} more")


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"


def exit_on_sigterm() -> None:
    """Make SIGTERM end the job as Ctrl+C does, with ``SystemExit(143)``. Python's default for
    SIGTERM ends the process at once, skipping the exit-time export of spans and the
    conversion of pending profiles. A script's own choice: otel-ort installs no handler."""

    def stop(signum: int, _: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
