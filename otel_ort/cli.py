"""The ``otel-ort`` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from otel_ort.version import __version__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``otel-ort`` console script; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="otel-ort", description="OpenTelemetry for ONNX Runtime: spans, metrics, profiles."
    )
    parser.add_argument("--version", action="version", version=f"otel-ort {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="instrument a small built-in model and show its spans (no server needed)"
    )
    demo.add_argument(
        "--output-dir",
        type=Path,
        default=Path("otel-ort-demo"),
        help="where the model and the spans file go (default: ./otel-ort-demo)",
    )
    demo.add_argument("--requests", type=int, default=20, help="number of requests (default 20)")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from otel_ort.demo import run_demo

        if args.requests < 1:
            parser.error("--requests must be at least 1")
        try:
            run_demo(args.output_dir, args.requests)
        except (RuntimeError, OSError) as exc:
            print(f"otel-ort demo: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
