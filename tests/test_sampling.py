"""Profile samplers, their text form, and forcing the profile of a run."""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext, TraceFlags

from otel_ort import profile_next_run, sampling
from otel_ort.instrumentation.options import parse_options
from otel_ort.sampling import (
    PROFILE_BAGGAGE_KEY,
    Always,
    EveryNth,
    Never,
    ParentBased,
    ProfileSampler,
    RateLimited,
    Ratio,
    parse_sampler,
    take_forced,
)
from tests.conftest import run_threads

SAMPLED = SpanContext(1, 1, False, TraceFlags(TraceFlags.SAMPLED))
NOT_SAMPLED = SpanContext(1, 1, False, TraceFlags(TraceFlags.DEFAULT))


def decisions(sampler: object, runs: int, context: SpanContext = SAMPLED) -> int:
    return sum(sampler.should_profile(context) for _ in range(runs))  # type: ignore[attr-defined]


def test_always_and_never() -> None:
    assert decisions(Always(), 10) == 10
    assert decisions(Never(), 10) == 0


def test_ratio_stays_inside_the_binomial_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling, "_draw", random.Random(4).random)  # no 0.1% flake
    # 400 runs at p = 0.25: the binomial's exact equal-tailed 99.9% interval is [72, 129]
    # (at most 0.05% of the mass below 72 and above 129)
    assert 72 <= decisions(Ratio(0.25), 400) <= 129
    assert decisions(Ratio(0.0), 100) == 0
    assert decisions(Ratio(1.0), 100) == 100


def test_every_nth_is_exact_and_can_skip_the_first_runs() -> None:
    assert decisions(EveryNth(10), 400) == 40
    sampler = EveryNth(3, skip_first=2)
    assert [sampler.should_profile(SAMPLED) for _ in range(8)] == [
        False, False, False, False, True, False, False, True,
    ]  # fmt: skip


def test_ratio_leaves_the_random_module_alone_and_forked_children_draw_apart() -> None:
    """A user's seeded ``random`` stream (data shuffling, augmentation) must not shift."""
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    decisions(Ratio(0.5), 100)
    assert [random.random() for _ in range(3)] == expected
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:  # two children forked from one parent state
        first, second = pool.map(_draws, [64, 64], chunksize=1)
    assert first != second


def _draws(runs: int) -> list[bool]:
    time.sleep(0.2)  # both pool processes take one task each
    sampler = Ratio(0.5)
    return [sampler.should_profile(SAMPLED) for _ in range(runs)]


def test_rate_limited_allows_the_burst_then_the_rate() -> None:
    sampler = RateLimited(per_second=1000.0, burst=3)
    assert decisions(sampler, 3) == 3
    slow = RateLimited(per_second=0.001, burst=2)
    assert decisions(slow, 50) == 2


def test_parent_based_profiles_only_sampled_traces() -> None:
    sampler = ParentBased(Always())
    assert sampler.should_profile(SAMPLED)
    assert not sampler.should_profile(NOT_SAMPLED)
    assert not sampler.should_profile(INVALID_SPAN_CONTEXT)
    counting = ParentBased(EveryNth(2))
    assert not counting.should_profile(SAMPLED)
    assert not counting.should_profile(NOT_SAMPLED)  # not asked: the inner count waits
    assert counting.should_profile(SAMPLED)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always", "Always()"),
        ("never", "Never()"),
        ("ratio:0.01", "Ratio(0.01)"),
        ("rate:2/s", "RateLimited(2.0, burst=1)"),
        ("rate: 1e-3/s", "RateLimited(0.001, burst=1)"),
        ("every:100", "EveryNth(100, skip_first=0)"),
        (" Parentbased_ratio:0.5 ", "ParentBased(Ratio(0.5))"),
        ("rate:2/s,burst=5", "RateLimited(2.0, burst=5)"),
        ("every:100, skip_first = 1000", "EveryNth(100, skip_first=1000)"),
        ("parentbased_every:10,skip_first=3", "ParentBased(EveryNth(10, skip_first=3))"),
    ],
)
def test_text_forms(text: str, expected: str) -> None:
    assert repr(parse_sampler(text)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sometimes", "unknown profile sampler 'sometimes'; valid spellings: always, never"),
        ("ratio:2", "p must be between 0 and 1"),
        ("ratio:x", "could not convert string to float"),
        ("every:0", "n must be >= 1"),
        ("rate:0/s", "must be a finite number > 0"),
        ("rate:nan/s", "must be a finite number > 0, got nan"),
        ("parentbased_parentbased_always", "unknown profile sampler"),
        ("rate:2/s,burst=0", "burst=...): must be 1 to 1000000000, got 0; valid spellings:"),
        ("rate:2/s,burst=" + "9" * 400, "burst=...): must be 1 to 1000000000, got 999"),
        (
            "every:10,skip_first=5,skip_first=0",
            "'every:10,skip_first=5,skip_first=0': skip_first is given twice; valid spellings:",
        ),
        ("parentbased_rate:x/s", "profile sampler 'parentbased_rate:x/s': could not convert"),
        ("rate:2/s,skip_first=3", "'skip_first=3' is not an option it takes: rate takes burst="),
        ("ratio:0.1,burst=2", "'burst=2' is not an option it takes: ratio takes no options"),
        ("every:10,skip_first", "'skip_first' is not an option it takes: every takes skip_fi"),
        ("every:10,skip_first=x", "invalid literal for int() with base 10: 'x'"),
        ("sometimes,burst=2", "unknown profile sampler 'sometimes,burst=2'"),
    ],
)
def test_bad_text_forms_say_what_is_valid(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_sampler(text)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Ratio(True), "Ratio(p): p must be a number, got True"),
        (lambda: RateLimited(1, burst=2.5),  # type: ignore[arg-type]
         "RateLimited(burst=...) must be a whole number (int)"),
        (lambda: RateLimited(1, burst=math.nan),  # type: ignore[arg-type]
         "burst=...) must be a whole number (int), got n"),
        (lambda: RateLimited("2"),  # type: ignore[arg-type]
         "RateLimited(per_second) must be a number, got '2'"),
        (lambda: EveryNth(1.5),  # type: ignore[arg-type]
         "EveryNth(n): n must be a whole number (int), got 1.5"),
        (lambda: EveryNth(2, skip_first=True), "EveryNth(skip_first=...) must be a whole number"),
    ],
)  # fmt: skip
def test_samplers_take_numbers_of_their_kind_only(
    make: Callable[[], ProfileSampler], message: str
) -> None:
    """1.5 would profile every 3rd run, a NaN burst none, True would mean 1."""
    with pytest.raises(TypeError, match=re.escape(message)):
        make()


def test_samplers_take_numpy_numbers() -> None:
    assert repr(EveryNth(np.int64(3), skip_first=np.int32(2))) == "EveryNth(3, skip_first=2)"
    assert repr(RateLimited(np.float64(2.5), burst=np.int64(4))) == "RateLimited(2.5, burst=4)"
    assert repr(Ratio(np.float32(0.5))) == "Ratio(0.5)"


def test_instrument_options_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_ORT_PROFILE_SAMPLER", "every:5")
    monkeypatch.setenv("OTEL_ORT_PROFILE_DIR", str(tmp_path / "somewhere"))
    monkeypatch.setenv("OTEL_ORT_PROFILE_MAX_FILES", "7")
    monkeypatch.setenv("OTEL_ORT_PROFILE_MODE", " ON ")  # as the sampler's: case, spaces
    profiling = parse_options({}).profiling
    assert repr(profiling.sampler) == "EveryNth(5, skip_first=0)"
    assert (profiling.directory, profiling.max_files, profiling.mode) == (
        str(tmp_path / "somewhere"),
        7,
        "on",
    )
    monkeypatch.setenv("OTEL_ORT_PROFILE_MODE", "Off")
    assert parse_options({}).profiling.mode == "off"
    assert parse_options({}).profiling.conversion == "process"
    monkeypatch.setenv("OTEL_ORT_PROFILE_CONVERSION", " Thread ")
    assert parse_options({}).profiling.conversion == "thread"
    assert parse_options({"profile_conversion": "process"}).profiling.conversion == "process"
    explicit = parse_options({"profile_sampler": Ratio(0.5), "profile_max_files": 3}).profiling
    assert (repr(explicit.sampler), explicit.max_files) == ("Ratio(0.5)", 3)


def test_default_is_no_profiling(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_ORT_PROFILE_SAMPLER", "OTEL_ORT_PROFILE_DIR", "OTEL_ORT_PROFILE_MODE"):
        monkeypatch.delenv(name, raising=False)
    profiling = parse_options({}).profiling
    assert isinstance(profiling.sampler, Never)
    assert profiling.directory is None


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"profile_sampler": 0.5}, TypeError, "must be an otel_ort.sampling sampler"),
        ({"profile_sampler": "ratio:7"}, ValueError, "between 0 and 1"),
        ({"profile_dir": 3}, TypeError, "profile_dir=...\\) must be a path"),
        ({"profile_dir": ""}, ValueError, "profile_dir=...\\): is empty: give a directory"),
        ({"profile_max_files": 0}, ValueError, "must be a whole number >= 1"),
        ({"profile_max_bytes": 1.5}, ValueError, "must be a whole number >= 1"),
        ({"profile_max_files": "3"}, TypeError, "profile_max_files=...\\) must be an int, got str"),
        ({"profile_mode": "always"}, ValueError, "'always': use one of on, off"),
        ({"profile_mode": "twin"}, ValueError, "'twin': profiling no longer uses a twin"),
        ({"profile_mode": "serve"}, ValueError, "use 'on' \\(the default\\) or 'off'"),
        ({"profile_conversion": "fork"}, ValueError, "'fork': use one of process, thread"),
    ],
)
def test_bad_profile_options(options: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_options(options)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_ORT_PROFILE_SAMPLER", "bogus", "unknown profile sampler 'bogus'"),
        ("OTEL_ORT_PROFILE_MODE", "serv", "is 'serv': use one of on, off"),
        ("OTEL_ORT_PROFILE_MODE", "Serve", "is 'Serve': profiling no longer uses a twin"),
        ("OTEL_ORT_PROFILE_MAX_BYTES", "lots", "must be a whole number >= 1"),
        ("OTEL_ORT_PROFILE_CONVERSION", "none", "is 'none': use one of process, thread"),
        ("OTEL_ORT_PROFILE_DIR", "OPEN", "is open to other users"),
        ("OTEL_ORT_PERF_EVENTS", "missing/perf_config.json", "perf_config.json"),
    ],
)
def test_a_bad_variable_is_logged_naming_it_and_profiling_is_off(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    variable: str,
    value: str,
    message: str,
) -> None:
    """Raising would stop ``opentelemetry-instrument`` loading every instrumentation."""
    if value == "OPEN":  # made by a plain mkdir: 0755
        value = str(tmp_path / "open")
        os.mkdir(value, 0o755)
    monkeypatch.setenv(variable, value)
    with caplog.at_level("ERROR", logger="otel_ort"):
        options = parse_options({})
    assert options.profiling.mode == "off"
    assert f"${variable}" in caplog.text and message in caplog.text
    assert "runs are traced but not profiled" in caplog.text


def test_a_bad_variable_does_not_stop_the_arguments_being_checked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_ORT_PROFILE_SAMPLER", "sometimes")
    with pytest.raises(ValueError, match=r"profile_max_files=...\) must be a whole number"):
        parse_options({"profile_max_files": 0})
    monkeypatch.setenv("OTEL_ORT_PROFILE_MODE", "serv")
    directory = tmp_path / "never-made"
    with caplog.at_level("ERROR", logger="otel_ort"):
        options = parse_options({"profile_dir": str(directory)})
    assert options.profiling.mode == "off" and not directory.exists()
    assert "$OTEL_ORT_PROFILE_MODE is 'serv'" in caplog.text  # both named, in one line
    assert "unknown profile sampler 'sometimes'" in caplog.text


@pytest.mark.parametrize("value", ["default", "Default", "true", "ON", "1"])
def test_perf_events_variable_spellings_of_the_defaults(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_ORT_PERF_EVENTS", value)
    perf = parse_options({}).profiling.perf
    assert perf is not None and not perf.explicit


def test_profile_next_run_forces_one_run_only() -> None:
    assert not take_forced()
    with profile_next_run():
        assert take_forced()
        assert not take_forced()
    assert not take_forced()


def test_a_profile_next_run_object_opens_one_block_at_a_time() -> None:
    block = profile_next_run()
    with block:
        assert take_forced()
    with block:  # again, after the first block ended
        assert take_forced()
    with pytest.raises(RuntimeError, match="already open"), block, block:
        pass
    assert not take_forced()  # the outer block still closed its request

    @profile_next_run()
    def forced(depth: int) -> list[bool]:
        taken = [take_forced()]
        return taken + forced(depth - 1) if depth else taken

    assert forced(2) == [True, True, True]  # each call its own block, recursion included
    assert not take_forced()


def test_profile_next_run_is_taken_once_across_copies_of_its_context() -> None:
    """``asyncio.to_thread`` and tasks run in copies of the context made inside the block: the
    first run in any of them takes the request, not the first run in each."""

    async def two_runs_in_threads() -> list[bool]:
        with profile_next_run():
            return [
                await asyncio.to_thread(take_forced),
                await asyncio.to_thread(take_forced),
                *await asyncio.gather(asyncio.to_thread(take_forced), asyncio.sleep(0, False)),
            ]

    assert asyncio.run(two_runs_in_threads()) == [True, False, False, False]
    assert not take_forced()


def test_baggage_key_is_the_documented_one() -> None:
    token = otel_context.attach(baggage.set_baggage(PROFILE_BAGGAGE_KEY, "1"))
    try:
        assert baggage.get_baggage("onnxruntime.profile") == "1"
    finally:
        otel_context.detach(token)


def test_rate_limited_works_in_a_forked_child() -> None:
    sampler = RateLimited(per_second=1000.0, burst=1)
    with sampler._lock:  # held by this thread at the fork: the child must not inherit it held
        pid = os.fork()
        if pid == 0:
            os._exit(0 if sampler.should_profile(SAMPLED) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_every_nth_stays_exact_with_threads_asking_at_once() -> None:
    sampler = EveryNth(7)
    answers: list[bool] = []

    def ask() -> None:
        for _ in range(2000):
            answers.append(sampler.should_profile(SAMPLED))

    run_threads([threading.Thread(target=ask) for _ in range(8)])
    assert sum(answers) == 16_000 // 7
