"""The ``otel-ort`` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from otel_ort.cli.tables import printable
from otel_ort.profiles.spans import DEFAULT_MAX_NODE_SPANS, DEFAULT_MAX_TRACE_BYTES
from otel_ort.profiling.store import DEFAULT_MAX_FILES
from otel_ort.version import __version__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``otel-ort`` console script; returns the exit status."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return status
    except KeyboardInterrupt:
        print("\notel-ort: interrupted", file=sys.stderr)
        return 130  # as a shell reports SIGINT
    except BrokenPipeError:  # `otel-ort ... | head`: the reader took what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number >= ``minimum`` (errors show the command's usage)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return whole_number


def _endpoint(text: str) -> str:
    """An argparse ``type``: an OTLP endpoint URL, ``http(s)://HOST[:PORT][/PATH]``."""
    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # out of range, or not a number
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an OTLP endpoint URL: give http://HOST:PORT (e.g. "
            "http://localhost:4317 for gRPC, http://localhost:4318 for http/protobuf)"
        )
    return text


def _main(argv: list[str] | None) -> int:
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
        help="where the model, spans, profiles and report go (default: ./otel-ort-demo)",
    )
    demo.add_argument(
        "--requests",
        type=_at_least(6),
        default=20,
        help="number of requests (default 20; at least 6: every fifth run is profiled)",
    )
    demo.add_argument(
        "--otlp-endpoint",
        type=_endpoint,
        metavar="URL",
        help="also send spans and metrics over OTLP, e.g. http://localhost:4317 (`make up`)",
    )
    demo.add_argument(
        "--protocol",
        choices=("grpc", "http/protobuf"),
        help="OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc); a collector "
        "takes grpc on port 4317, http/protobuf on 4318",
    )

    convert = commands.add_parser(
        "convert", help="replay ORT profile files as traces: one per run, a span per node"
    )
    convert.add_argument("profiles", nargs="+", metavar="PROFILE.json")
    convert.add_argument("--service-name", help="service.name of the spans (default: onnxruntime)")
    convert.add_argument(
        "--otlp-endpoint", type=_endpoint, metavar="URL", help="e.g. http://localhost:4317"
    )
    convert.add_argument("--protocol", choices=("grpc", "http/protobuf"), default="grpc")
    convert.add_argument("--console", action="store_true", help="print the span trees")
    convert.add_argument("--output", metavar="FILE", help="append the spans as OTLP/JSON lines")
    convert.add_argument(
        "--max-node-spans",
        type=_at_least(0),
        default=DEFAULT_MAX_NODE_SPANS,
        help=f"node and kernel spans per run at most (default {DEFAULT_MAX_NODE_SPANS}); "
        "the rest are summarised on the run span",
    )
    convert.add_argument(
        "--max-trace-bytes",
        type=_at_least(0),
        default=DEFAULT_MAX_TRACE_BYTES,
        help=f"bytes of node and kernel spans per run at most, as OTLP protobuf (default "
        f"{DEFAULT_MAX_TRACE_BYTES:,}, under Grafana Tempo's default 5,000,000 per trace); "
        "the longest nodes are kept, the rest summarised on the run span",
    )

    summary = commands.add_parser("summary", help="tables of where a profile's time went")
    summary.add_argument("profile", metavar="PROFILE.json")
    summary.add_argument(
        "--top", type=_at_least(1), default=15, help="rows of the top-nodes table (default 15)"
    )
    _add_profile_parser(commands)
    _add_report_parser(commands)
    args = parser.parse_args(argv)

    if args.command == "convert":
        return _convert(args)
    if args.command == "summary":
        return _summary(args)
    if args.command == "profile":
        return _profile(args)
    if args.command == "report":
        return _report(args)
    if args.command == "demo":
        return _demo(args)
    return 0


def _error(command: str, problem: object) -> int:
    """Say ``problem`` (which may quote a model's or a file's text) on stderr; exit status 1."""
    print(f"otel-ort {command}: {printable(str(problem))}", file=sys.stderr)
    return 1


def _demo(args: argparse.Namespace) -> int:
    from otel_ort.cli.demo import run_demo

    if args.output_dir.exists() and not args.output_dir.is_dir():
        print(
            f"otel-ort demo: {args.output_dir} is a file, not a directory; choose another "
            "--output-dir",
            file=sys.stderr,
        )
        return 1
    try:
        lost = run_demo(
            args.output_dir, args.requests, otlp_endpoint=args.otlp_endpoint, protocol=args.protocol
        )
    except OSError as exc:
        where = f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else str(exc)
        print(f"otel-ort demo: {where}; choose another --output-dir", file=sys.stderr)
        return 1
    except (RuntimeError, ValueError) as exc:
        return _error("demo", exc)
    if lost:
        print(
            f"otel-ort demo: {lost} spans did not reach {args.otlp_endpoint}: check the "
            "endpoint and --protocol (a collector takes grpc, the default, on port 4317 and "
            "http/protobuf on 4318), and that one is listening there (`make up` starts one)",
            file=sys.stderr,
        )
        return 1
    return 0


def _convert(args: argparse.Namespace) -> int:
    from otel_ort.cli.convert import ConvertOptions, convert_files

    options = ConvertOptions(
        service_name=args.service_name,
        otlp_endpoint=args.otlp_endpoint,
        protocol=args.protocol,
        console=args.console or not (args.otlp_endpoint or args.output),
        output=args.output,
        max_node_spans=args.max_node_spans,
        max_trace_bytes=args.max_trace_bytes,
    )
    failed = convert_files(args.profiles, options)
    return 1 if failed else 0


def _summary(args: argparse.Namespace) -> int:
    from otel_ort.profiles import ProfileError, read_profile
    from otel_ort.profiles.summary import summarize

    try:
        profile = read_profile(args.profile)
    except ProfileError as exc:
        return _error("summary", exc)
    print(summarize([profile], top=args.top))
    return 0


def _add_profile_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    profile = commands.add_parser(
        "profile",
        help="run a model with ORT's run-level profiling: tables, trace files, optional spans",
    )
    profile.add_argument("model", metavar="MODEL.onnx")
    profile.add_argument("--runs", type=_at_least(1), default=10, help="profiled runs (default 10)")
    profile.add_argument(
        "--warmup", type=_at_least(0), default=1, help="unprofiled runs before them (default 1)"
    )
    profile.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="dimensions of input NAME (unknown ones default to 1); repeatable",
    )
    profile.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="this array for input NAME instead of seeded random data; repeatable",
    )
    profile.add_argument(
        "--profile-dir",
        help="where the profile files go (default: ./otel-ort-profiles)",
    )
    profile.add_argument(
        "--max-files",
        type=_at_least(1),
        default=DEFAULT_MAX_FILES,
        metavar="N",
        help=f"the directory keeps the newest N profile files (default {DEFAULT_MAX_FILES}), "
        "as instrument(profile_max_files=...)",
    )
    profile.add_argument(
        "--perf-events",
        metavar="EVENTS",
        help="perf events counted per node: comma-separated (e.g. task-clock,cycles), a "
        "perf_config.json, or off (default: $OTEL_ORT_PERF_EVENTS, else task-clock, "
        "page-faults, context-switches, and cycles, instructions where there is a PMU)",
    )
    profile.add_argument(
        "--otlp-endpoint", type=_endpoint, metavar="URL", help="also send each run as a trace"
    )
    profile.add_argument("--protocol", choices=("grpc", "http/protobuf"), default="grpc")
    profile.add_argument("--service-name", help="service.name of the spans (default: onnxruntime)")


def _profile(args: argparse.Namespace) -> int:
    from otel_ort.cli.profile_command import DEFAULT_PROFILE_DIR, ProfileRequest, run_profile

    request = ProfileRequest(
        model=args.model,
        runs=args.runs,
        warmup=args.warmup,
        shapes=args.shape,
        inputs=args.input,
        profile_dir=DEFAULT_PROFILE_DIR if args.profile_dir is None else args.profile_dir,
        max_files=args.max_files,
        otlp_endpoint=args.otlp_endpoint,
        protocol=args.protocol,
        service_name=args.service_name,
        perf_events=args.perf_events,
    )
    return run_profile(request)


def _add_report_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    from otel_ort.report import DEFAULT_TOP

    report = commands.add_parser(
        "report",
        help="a profile as one self-contained HTML page: timeline, time per op type, top nodes",
    )
    report.add_argument("profile", metavar="PROFILE.json")
    report.add_argument(
        "-o",
        "--output",
        metavar="REPORT.html",
        help="where the page goes (default: ./<profile name>.html; a directory: that file in it)",
    )
    report.add_argument(
        "--run",
        type=int,
        metavar="N",
        help="the run shown first, from 0 (default: the first with events); "
        "the page's run picker switches runs of a session-level file",
    )
    report.add_argument(
        "--top",
        type=_at_least(1),
        default=DEFAULT_TOP,
        help=f"rows of the top-nodes table (default {DEFAULT_TOP})",
    )
    report.add_argument(
        "--perf",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="perf counter columns and details: shown whenever the file has them; --perf "
        "also says so when it has none, --no-perf leaves them out",
    )


def _report(args: argparse.Namespace) -> int:
    from otel_ort.report import ReportError, build_report, default_output, save_report

    try:
        report = build_report(args.profile, perf=args.perf, top=args.top, run=args.run)
    except ReportError as exc:
        return _error("report", exc)
    out = args.output or default_output(args.profile)
    try:
        target = save_report(report, args.profile, out)
    except ReportError as exc:
        return _error("report", exc)
    except OSError as exc:
        print(
            f"otel-ort report: cannot write {out} ({exc.strerror or exc}): "
            "pick a writable place with -o",
            file=sys.stderr,
        )
        return 1
    for note in report.notes:
        print(f"otel-ort report: note: {printable(note)}", file=sys.stderr)
    size = os.path.getsize(target) / 1024
    print(
        f"{target}: run {report.run} of {report.runs} ({report.nodes} nodes), {size:,.0f} KiB, "
        "self-contained: open it in a browser"
    )
    return 0
