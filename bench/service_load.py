"""What profiling a sample of runs costs a real service under load: the FastAPI example
(``examples/fastapi_service``) on uvicorn, one worker, driven by ``wrk``.

    make bench   (or: .venv/bin/python -m bench.service_load [--quick] [--models cls,rec]
                  [--repetitions R] [--seconds S] [--instances N] [--baseline never]
                  [--sampler rate:2/s] [--baseline-perf-events off] [--perf-events off]
                  [--baseline-conversion thread] [--conversion thread]
                  [--leave-out PART] [--spinning])

Per model, two servers of the same app run side by side, one with the profile sampler
``never`` (tracing only) and one with ``rate:2/s``; each exports its spans and metrics over
OTLP/gRPC to a real receiver in a third process (``bench.otlp_sink``), so export is paid as in
production. Each repetition loads one server, then the other (the order alternates, ABBA), for
the same seconds with ``wrk -t2 -c8`` (8 connections: the one worker is saturated); the
``rate:2/s`` figures are taken as ratios to the ``never`` ones of the same repetition, and the
median ratio is reported, with the mean and its 95 % interval. ``--instances`` starts that many
pairs of servers, one after the other, each for ``--repetitions`` repetitions: a pair of server
processes has a speed of its own, which repetitions on one pair cannot average out, so the
interval is taken over the pairs (none with one pair). The two servers of a pair share one
``PYTHONHASHSEED``, a new one per pair unless the caller set one: with a seed each, two
servers that did the same work differed by 6.5 % (the standard deviation over pairs), with
one seed by 1.5 %. Blocks are short (2 s) and many (16 per pair, 8 with ``--quick``), so
that the VM's changes of speed, which last seconds, fall on both servers alike. Targets:
requests/s at most 5 % lower, p99 at most 15 % higher.
``--baseline`` and ``--sampler`` compare two others: ``--sampler every:1000000000``
profiles one run per server (its first), which prices what stays on after a session's first
profiled run (ORT's thread-pool profiler, perf's always-counting events) apart from the
profiled runs themselves. ``--baseline-perf-events`` and ``--perf-events`` set one server's
``OTEL_ORT_PERF_EVENTS`` (unset: otel-ort's default events), so that one sampler can be compared
with perf off and on (``--baseline rate:2/s --baseline-perf-events off``). ``--leave-out``
prices one part of a profiled run's work: the compared server leaves it out
(``bench/leave_out``: ``conversion``, ``delivery``, ``kept-file``, ``ort-profiling``,
``perf-work``, ``profiled-run``), e.g.
``--baseline rate:2/s --leave-out conversion``; both servers then import otel-ort at their
start, as the one that leaves a part out must. ``--baseline-conversion`` and ``--conversion``
set one server's ``OTEL_ORT_PROFILE_CONVERSION``, so that the conversion process can be
compared with the worker thread (``--baseline rate:2/s --baseline-conversion thread``).
``--spinning``
runs both servers with ORT's intra-op threads spin-waiting for work (ORT's default, the
example's ``ORT_SERVICE_SPINNING=1``); without it they wait without spinning, as the example
serves by default (``--no-spinning`` says so explicitly).

Models: the rapidocr classifier (235 nodes, ~3 ms a run) and recogniser (415 nodes, ~25 ms),
served through ``ORT_SERVICE_MODEL`` behind one ``Reshape`` (and an ``ArgMax`` for the
recogniser) so that they take the example's ``[batch, features]`` rows
(``bench/service_models.py`` says why). A request is one JSON row of 27,648 (cls) or
46,080 (rec) pixels; uvicorn runs without its access log.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.leave_out import FOLDER as LEAVE_OUT_FOLDER
from bench.leave_out import NO_CONVERSION
from bench.leave_out import PARTS as LEAVE_OUT_PARTS
from bench.otlp_sink import ROOT, Received, SinkProcess
from bench.service_models import SERVED_MODELS, ServedModel, flat_model, request_body
from bench.wheel_models import add_model_options, chosen_models
from bench.wrk import WrkResult, post_script, run_wrk, wrk_binary
from otel_ort.environment_variables import OTEL_ORT_PROFILE_CONVERSION
from otel_ort.sampling import Never, parse_sampler
from tests.helpers.otlp_receiver import free_port

SAMPLERS = ("never", "rate:2/s")
TARGET_RPS_DROP = 0.05
TARGET_P99_RISE = 0.15
CONNECTIONS = 8
WRK_THREADS = 2


@dataclass(frozen=True)
class Setup:
    """How one server profiles: its sampler and, when given, its ``OTEL_ORT_PERF_EVENTS``, the
    part of each profiled run's work it leaves out (``bench.leave_out.PARTS``) and where its
    profiles are converted."""

    sampler: str
    perf_events: str | None = None
    leave_out: str | None = None
    conversion: str | None = None
    """Its ``OTEL_ORT_PROFILE_CONVERSION`` (``None``: otel-ort's default)."""

    @property
    def label(self) -> str:
        perf = "" if self.perf_events is None else f", perf {self.perf_events}"
        where = "" if self.conversion is None else f", conversion {self.conversion}"
        without = "" if self.leave_out is None else f", without {self.leave_out}"
        return self.sampler + perf + where + without


SETUPS = (Setup(SAMPLERS[0]), Setup(SAMPLERS[1]))


@dataclass
class Server:
    """One uvicorn process serving the example with one setup."""

    setup: Setup
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/predict"


@dataclass(frozen=True)
class Block:
    """One load block on one server."""

    wrk: WrkResult
    rss_mb: float
    cpu_ms_per_request: float


@dataclass(frozen=True)
class NotAsSetUp:
    """A server that did not run as its setup says."""

    model: str
    pair: int
    setup: Setup
    why: str
    log: Path


@dataclass(frozen=True)
class Measured:
    """What ``measure`` found for one model."""

    blocks: dict[Setup, list[Block]]
    """Each setup's blocks, in repetition order."""
    received: list[Received]
    """What each setup's receivers took, in ``setups`` order."""
    not_as_set_up: list[NotAsSetUp]
    """Servers that did not run as their setup says (their figures are not that setup's)."""


def start_server(
    setup: Setup,
    model: Path,
    endpoint: str,
    workdir: Path,
    spinning: bool = False,
    hooked: bool = False,
    hash_seed: str | None = None,
) -> Server:
    """The example on uvicorn (one worker, no access log), exporting to ``endpoint``;
    ``spinning``: ORT's threads spin-wait for work (ORT's default, not the example's);
    ``hooked``: with ``bench/leave_out`` loaded at its start (leaving out
    ``setup.leave_out``, if any); ``hash_seed``: its ``PYTHONHASHSEED``."""
    port = free_port()
    tag = "".join(c if c.isalnum() else "-" for c in setup.label)
    env = {
        **os.environ,
        "ORT_SERVICE_MODEL": str(model),
        "ORT_SERVICE_SPINNING": "1" if spinning else "0",
        "OTEL_ORT_PROFILE_SAMPLER": setup.sampler,
        "OTEL_ORT_PROFILE_DIR": str(workdir / f"profiles-{tag}"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": f"bench-{tag}",
    }
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    if setup.perf_events is not None:
        env["OTEL_ORT_PERF_EVENTS"] = setup.perf_events
    if setup.conversion is not None:
        env["OTEL_ORT_PROFILE_CONVERSION"] = setup.conversion
    if hooked or setup.leave_out is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(LEAVE_OUT_FOLDER), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        env["OTEL_ORT_BENCH_LEAVE_OUT"] = setup.leave_out or "nothing"
    log = workdir / f"uvicorn-{tag}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "examples.fastapi_service.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Server(setup, port, process, log)


def pair_hash_seed() -> str:
    """One ``PYTHONHASHSEED`` for both servers of a pair, a new one for each pair (the
    caller's own, when it set one other than ``random``). A server's speed depends on its
    hash seed by several % here (string and dict layouts); two servers with their own seeds
    would differ by that much whatever they do."""
    own = os.environ.get("PYTHONHASHSEED", "random")
    return str(random.randrange(1, 2**32)) if own in ("", "random") else own


def wait_ready(server: Server, body: bytes, timeout: float = 120.0) -> None:
    """Until ``/predict`` answers 200 to ``body``; ``SystemExit`` with the server's log if
    it ends or does not answer in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            break
        request = urllib.request.Request(
            server.url, body, {"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.3)
    stop_server(server)
    raise SystemExit(f"the {server.setup.label} server did not serve:\n{server.log.read_text()}")


def stop_server(server: Server) -> None:
    """SIGTERM (uvicorn's graceful shutdown: the app's telemetry flushes), then kill at 30 s."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` now, MB."""
    with open(f"/proc/{pid}/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kib / 1024


def cpu_s(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads) so far, seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_block(server: Server, script: Path, seconds: float) -> Block:
    pid = server.process.pid
    before = cpu_s(pid)
    result = run_wrk(server.url, script, seconds, WRK_THREADS, CONNECTIONS)
    used = cpu_s(pid) - before
    return Block(result, rss_mb(pid), 1000 * used / max(1, result.requests))


def measure(
    served: ServedModel,
    cache: Path,
    repetitions: int,
    seconds: float,
    warmup: float,
    setups: tuple[Setup, Setup] = SETUPS,
    spinning: bool = False,
    instances: int = 1,
) -> Measured:
    """Blocks per setup of ``setups`` (repetition order, ``instances`` pairs of servers one
    after the other), what each setup's receivers took, and each server that should have
    converted in otel-ort's conversion process but had none at its end."""
    model = flat_model(served, cache)
    workdir = Path(tempfile.mkdtemp(prefix="otel-ort-service-load-"))
    body = workdir / "body.json"
    body.write_bytes(request_body(served))
    script = workdir / "post.lua"
    script.write_text(post_script(body))
    blocks: dict[Setup, list[Block]] = {setup: [] for setup in setups}
    hooked = any(setup.leave_out is not None for setup in setups)
    taken = [Received(0, 0) for _ in setups]
    not_as_set_up: list[NotAsSetUp] = []
    for instance in range(instances):
        with SinkProcess(len(setups)) as sink:
            started = setups if instance % 2 == 0 else setups[::-1]  # who starts first, too
            folder = workdir / f"pair-{instance + 1}"  # its own kept files and logs
            folder.mkdir()
            seed = pair_hash_seed()
            servers: dict[Setup, Server] = {}
            try:
                for setup, endpoint in zip(started, sink.endpoints, strict=True):
                    servers[setup] = start_server(
                        setup, model, endpoint, folder, spinning, hooked, seed
                    )
                for server in servers.values():
                    wait_ready(server, body.read_bytes())
                    label = server.setup.label
                    _progress(
                        f"  {served.key}: {label} ready (hash seed {seed}); "
                        f"warming up {warmup:.0f} s"
                    )
                    run_wrk(server.url, script, warmup, WRK_THREADS, CONNECTIONS)
                for repetition in range(repetitions):
                    turn = instance * repetitions + repetition
                    for setup in setups if turn % 2 == 0 else setups[::-1]:
                        block = load_block(servers[setup], script, seconds)
                        blocks[setup].append(block)
                        _progress(
                            f"  {served.key} {turn + 1}/{instances * repetitions} {setup.label}: "
                            f"{block.wrk.requests_per_s:.1f} req/s, p99 {block.wrk.p99_ms:.1f} ms"
                        )
                not_as_set_up += [
                    NotAsSetUp(served.key, instance + 1, setup, why, server.log)
                    for setup, server in servers.items()
                    if (why := conversion_check(server)) is not None
                ]
            finally:
                for server in servers.values():
                    stop_server(server)
            received = dict(zip(started, sink.received(), strict=True))
        taken = [
            Received(was.spans + received[setup].spans, was.run_spans + received[setup].run_spans)
            for was, setup in zip(taken, setups, strict=True)
        ]
    return Measured(blocks, taken, not_as_set_up)


CONVERSION_FAILED = "the conversion process failed"
"""What otel-ort's warning says when a server's conversion process fails (its worker then
converts until a new one is ready, or for good after three failures in a row)."""


def converts_in_process(setup: Setup) -> bool:
    """Whether a server of ``setup`` converts its profiled runs in otel-ort's conversion
    process (otel-ort's default, unless the setup or the bench's own environment says
    ``thread``), so that it has one once it has profiled a run."""
    conversion = setup.conversion or os.environ.get(OTEL_ORT_PROFILE_CONVERSION, "process")
    return (
        not isinstance(parse_sampler(setup.sampler), Never)
        and conversion.strip().lower() != "thread"
        and setup.leave_out not in NO_CONVERSION
    )


def conversion_check(server: Server) -> str | None:
    """Why ``server`` did not convert in its conversion process throughout, if its setup
    says it should and it did not: it ended, its log says a conversion process failed, or it
    has no live conversion process."""
    if not converts_in_process(server.setup):
        return None
    if server.process.poll() is not None:
        return f"it ended (exit status {server.process.returncode})"
    if CONVERSION_FAILED in server.log.read_text(errors="replace"):
        return f"its log says {CONVERSION_FAILED!r}: its worker converted meanwhile"
    if not live_child_pids(server.process.pid):
        return "it had no conversion process at its end: its worker converted"
    return None


def live_child_pids(pid: int) -> list[int]:
    """The processes whose parent is process ``pid``, but those that ended and wait for it
    to reap them."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):  # it ended meanwhile
            continue
        if int(parent) == pid and state != "Z":
            children.append(int(entry))
    return children


def paired_ratios(base: list[float], other: list[float]) -> list[float]:
    """``other[i] / base[i]`` for each repetition ``i``."""
    if len(base) != len(other) or not base:
        raise ValueError(f"paired ratios need equal, non-empty lists ({len(base)}, {len(other)})")
    return [b / a for a, b in zip(base, other, strict=True)]


def _spread(ratios: list[float]) -> str:
    """Median change in %, with the range over repetitions."""

    def pct(ratio: float) -> str:
        return f"{100 * (ratio - 1):+.1f}"

    return f"{pct(statistics.median(ratios))} % [{pct(min(ratios))}, {pct(max(ratios))}]"


_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t, two-sided 95 %, for 1 to 10 degrees of freedom (1.96 beyond)."""


def mean_interval(ratios: list[float], instances: int) -> str:
    """The mean change in %, ± the half-width of its 95 % interval. ``ratios`` come in
    ``instances`` equal runs, one per pair of servers, whose blocks share that pair's own
    speed: so the interval is Student's t over the pairs' means ("n/a" with one pair)."""
    size = len(ratios) // instances
    means = [statistics.fmean(ratios[i * size : (i + 1) * size]) for i in range(instances)]
    mean = 100 * (statistics.fmean(means) - 1)
    if instances < 2:
        return f"{mean:+.1f} % ± n/a (one pair of servers)"
    t = _T_975[instances - 2] if instances - 1 <= len(_T_975) else 1.96
    return f"{mean:+.1f} % ± {100 * t * statistics.stdev(means) / instances**0.5:.1f}"


def chosen_setups(
    parser: argparse.ArgumentParser,
    baseline: Setup,
    compared: Setup,
) -> tuple[Setup, Setup]:
    """``--baseline``/``--baseline-perf-events`` and ``--sampler``/``--perf-events``: two
    different setups, each sampler as ``OTEL_ORT_PROFILE_SAMPLER`` spells it."""
    if baseline == compared:
        parser.error(f"both servers would be {compared.label!r}: nothing to compare")
    for name in (baseline.sampler, compared.sampler):
        try:
            parse_sampler(name)
        except ValueError as exc:
            parser.error(str(exc))
    return baseline, compared


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one pair of servers, 8 repetitions of 2 s"
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        default=None,
        help="per pair of servers; default 16 (8 with --quick)",
    )
    parser.add_argument("--seconds", type=float, default=None, help="per block; default 2")
    parser.add_argument(
        "--spinning",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="ORT's threads spin-wait for work (ORT's default, ORT_SERVICE_SPINNING=1), both "
        "servers; default: no spinning, as the example serves",
    )
    parser.add_argument("--baseline", default=SAMPLERS[0], help=f"default {SAMPLERS[0]}")
    parser.add_argument(
        "--sampler", default=SAMPLERS[1], help=f"compared with the baseline; default {SAMPLERS[1]}"
    )
    parser.add_argument(
        "--baseline-perf-events", default=None, help="the baseline's OTEL_ORT_PERF_EVENTS"
    )
    parser.add_argument("--perf-events", default=None, help="the other's OTEL_ORT_PERF_EVENTS")
    for prefix, whose in (("--baseline-", "the baseline's"), ("--", "the other's")):
        parser.add_argument(
            f"{prefix}conversion",
            choices=("process", "thread"),
            default=None,
            help=f"{whose} OTEL_ORT_PROFILE_CONVERSION",
        )
    parser.add_argument(
        "--leave-out",
        choices=sorted(LEAVE_OUT_PARTS),
        default=None,
        help="the compared server leaves this part of each profiled run's work out",
    )
    parser.add_argument(
        "--instances",
        type=int,
        default=None,
        help="pairs of servers, one after the other; default 3",
    )
    add_model_options(parser, SERVED_MODELS)
    args = parser.parse_args()
    repetitions = args.repetitions or (8 if args.quick else 16)
    seconds = args.seconds or 2.0
    args.instances = args.instances or (1 if args.quick else 3)
    keys = chosen_models(parser, args.models, SERVED_MODELS)
    if repetitions < 1 or seconds < 1 or args.instances < 1:
        parser.error("--repetitions, --seconds and --instances must be at least 1")
    setups = chosen_setups(
        parser,
        Setup(args.baseline, args.baseline_perf_events, conversion=args.baseline_conversion),
        Setup(args.sampler, args.perf_events, args.leave_out, args.conversion),
    )
    wrk_binary()
    _progress(
        f"service_load: {args.instances} x {repetitions} x {seconds:.0f} s per server and model, "
        f"wrk -t{WRK_THREADS} -c{CONNECTIONS}, ORT's spinning "
        f"{'on' if args.spinning else 'off'}, {time.ctime()}"
    )
    rows, pairs, not_as_set_up = [], [], []
    for key in keys:
        served = SERVED_MODELS[key]
        measured = measure(
            served,
            args.cache,
            repetitions,
            seconds,
            3.0,
            setups,
            args.spinning,
            args.instances,
        )
        blocks = measured.blocks
        not_as_set_up += measured.not_as_set_up
        for setup, got in zip(setups, measured.received, strict=True):
            mine = blocks[setup]
            cells = (
                served.source.name,
                setup.label,
                f"{statistics.median(b.wrk.requests_per_s for b in mine):.1f}",
                f"{statistics.median(b.wrk.p50_ms for b in mine):.1f}",
                f"{statistics.median(b.wrk.p99_ms for b in mine):.1f}",
                f"{statistics.median(b.cpu_ms_per_request for b in mine):.1f}",
                f"{mine[-1].rss_mb:.0f}",
                f"{got.spans / max(1, got.run_spans):.1f}",
                str(sum(b.wrk.errors for b in mine)),
            )
            rows.append("| " + " | ".join(cells) + " |")
        base, rate = blocks[setups[0]], blocks[setups[1]]
        rps = paired_ratios(
            [b.wrk.requests_per_s for b in base], [b.wrk.requests_per_s for b in rate]
        )
        p99 = paired_ratios([b.wrk.p99_ms for b in base], [b.wrk.p99_ms for b in rate])
        met_rps = 1 - statistics.median(rps) <= TARGET_RPS_DROP
        met_p99 = statistics.median(p99) - 1 <= TARGET_P99_RISE
        caveat = ", not as set up (below)" if measured.not_as_set_up else ""
        pair = (
            served.source.name,
            _spread(rps),
            mean_interval(rps, args.instances),
            ("met" if met_rps else "missed") + caveat,
            _spread(p99),
            ("met" if met_p99 else "missed") + caveat,
        )
        pairs.append("| " + " | ".join(pair) + " |")
    print(
        f"\nservice_load, {time.strftime('%Y-%m-%d')}: medians over "
        f"{args.instances * repetitions} blocks of "
        f"{seconds:.0f} s (wrk -t{WRK_THREADS} -c{CONNECTIONS}; ORT's spinning "
        f"{'on' if args.spinning else 'off'})"
    )
    print(
        "| model | server | requests/s | p50 ms | p99 ms | server CPU ms/request | RSS MB "
        "| spans per run span | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{setups[1].label} against {setups[0].label}, paired by repetition: median [min, max]")
    print(
        "| model | requests/s | requests/s, mean ± 95 % | target (>= -5 %) | p99 "
        "| target (<= +15 %) |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(pairs))
    if not_as_set_up:
        print("\nNot as set up (their models' figures above are not their setups'):")
        for server in not_as_set_up:
            print(
                f"- {server.model}, pair {server.pair}, the {server.setup.label} server: "
                f"{server.why} (its log: {server.log})"
            )


if __name__ == "__main__":
    main()
