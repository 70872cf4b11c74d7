"""``otel-ort profile``'s perf counting: the session's threads (the calling thread and ORT's
intra-op pool) counted during each profiled run, as the engine counts a session's, and what
was counted (or why not) said once at the end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from otel_ort.instrumentation.options import PerfOptions
from otel_ort.perf.counting import Counting, PerfCounters, Pool, RawRun
from otel_ort.perf.report import ProfileCounts, count_profile
from otel_ort.profiles.records import Profile


class CommandPerf:
    """perf counting of the session's threads during each profiled run (the records of each
    run's window only, so ORT's pool spinning between runs is not counted); off, or saying why
    not, where perf cannot count. Never raises: what goes wrong is said in ``describe``."""

    def __init__(
        self, options: PerfOptions | None, threads: Sequence[int], sequential: bool
    ) -> None:
        self._caller_runs_nodes = sequential
        self._perf: PerfCounters | None = None
        self._pool: Pool | None = None
        self._problems: Counter[str] = Counter()
        """Why runs, or some of their threads, were not counted: how many runs each."""
        self._runs = 0
        if options is not None:
            self._perf = PerfCounters(options.events, options.period_ns, options.explicit)
            try:
                if self._perf.prepare(quiet=True):  # switched per run: ORT's pool spinning
                    self._pool = self._perf.pool(threads)  # between
                    # runs is no run's, and no request waits on the switching here
            except Exception as exc:
                self._perf.unavailable = f"perf counters could not be set up: {exc!r}"

    def __enter__(self) -> CommandPerf:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._perf is not None:
            self._perf.close()

    def begin(self) -> Counting | str | None:
        """Just before a run: its counting started (or why not; ``None``: perf is off)."""
        if self._perf is None or self._pool is None:
            return None
        return self._perf.begin(self._pool)

    def end(self, started: Counting | str | None) -> RawRun | str | None:
        """Just after the run ``begin`` started: what was counted (or why nothing was)."""
        if not isinstance(started, Counting):
            return started
        assert self._perf is not None  # it began the counting
        return self._perf.end(started, caller_runs_nodes=self._caller_runs_nodes)

    def count(self, profile: Profile, counted: RawRun | str | None) -> ProfileCounts | None:
        """The run's counts per node, added to ``profile``'s events as counter tracks; the
        problems are kept for ``describe``."""
        if self._perf is None or self._pool is None:
            return None
        self._runs += 1
        if isinstance(counted, str):
            self._problems[counted] += 1
            return None
        if counted is None or not profile.runs:  # (an empty profile: the run failed)
            return None
        try:
            counts = count_profile(self._perf.settled(counted), profile)
        except Exception as exc:
            self._problems[f"attributing perf counts failed: {exc!r}"] += 1
            return None
        self._problems.update(set(counts.problems))
        profile.events.extend(counts.tracks())  # for the kept file and the summary tables
        return counts

    def describe(self) -> str:
        """What perf counted, each event it could not count and why, and what went wrong in
        some runs."""
        if self._perf is None:
            return "perf counters: off (--perf-events off, or OTEL_ORT_PERF_EVENTS=off)"
        if self._pool is None:
            return f"perf counters: none ({self._perf.unavailable})"
        counted = ", ".join(self._perf.counted_aliases)
        lines = [f"perf counters: {counted} (per node in the tables below)"]
        lines += [f"  not counted: {line}" for line in self._perf.unavailable_events]
        lines += [f"  {line}" for line in self._pool.problems]
        lines += [
            f"  in {runs} of {self._runs} runs: {problem}"
            for problem, runs in self._problems.most_common()
        ]
        return "\n".join(lines)
