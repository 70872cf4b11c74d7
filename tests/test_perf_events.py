"""Perf event selections: names, aliases, raw events, the ORT fork's JSON file, libpfm4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_ort.perf import pfm
from otel_ort.perf.events import (
    GENERIC_EVENTS,
    EventSpec,
    PerfConfigError,
    Unavailable,
    default_event_names,
    parse_events,
)

DATA = Path(__file__).parent / "data"
# The example perf_config.json of github.com/AlexanderPuckhaber/onnxruntime (README.md)
FORK_CONFIG = DATA / "perf_config.json"
MISSING_LIBRARY = "libdoesnotexist.so.0"


def _libpfm_reason() -> str | None:
    try:
        pfm.load()
    except pfm.PfmUnavailableError as exc:
        return str(exc)
    return None


needs_libpfm = pytest.mark.skipif(
    _libpfm_reason() is not None, reason=f"libpfm4 unavailable: {_libpfm_reason()}"
)


def only(value: str) -> EventSpec:
    selection = parse_events(value)
    assert selection.unavailable == ()
    (event,) = selection.events
    return event


@pytest.mark.parametrize(
    ("name", "type_", "config"),
    [
        ("cycles", 0, 0),
        ("cpu-cycles", 0, 0),
        ("instructions", 0, 1),
        ("cache-references", 0, 2),
        ("cache-misses", 0, 3),
        ("branches", 0, 4),
        ("branch-instructions", 0, 4),
        ("branch-misses", 0, 5),
        ("stalled-cycles-frontend", 0, 7),
        ("stalled-cycles-backend", 0, 8),
        ("cpu-clock", 1, 0),
        ("task-clock", 1, 1),
        ("page-faults", 1, 2),
        ("faults", 1, 2),
        ("context-switches", 1, 3),
        ("cs", 1, 3),
        ("cpu-migrations", 1, 4),
        ("migrations", 1, 4),
        ("minor-faults", 1, 5),
        ("major-faults", 1, 6),
        ("L1-dcache-load-misses", 3, 0x10000),
        ("LLC-loads", 3, 0x2),
        ("dTLB-load-misses", 3, 0x10003),
        ("branch-load-misses", 3, 0x10005),
        ("L1-icache-prefetches", 3, 0x201),
    ],
)
def test_generic_names(name, type_, config):
    event = only(name)
    assert (event.name, event.alias, event.type, event.config) == (name, name, type_, config)
    assert (event.config1, event.config2) == (0, 0)


@pytest.mark.parametrize(
    ("name", "kind", "unit"),
    [
        ("task-clock", "time", "ns"),
        ("cpu-clock", "dense", "ns"),
        ("page-faults", "sparse", "1"),
        ("context-switches", "sparse", "1"),
        ("cpu-migrations", "sparse", "1"),
        ("minor-faults", "sparse", "1"),
        ("major-faults", "sparse", "1"),
        ("cycles", "dense", "1"),
        ("LLC-loads", "dense", "1"),
        ("r01c2", "dense", "1"),
    ],
)
def test_kind_and_unit(name, kind, unit):
    event = only(name)
    assert (event.kind, event.unit) == (kind, unit)


def test_comma_string_keeps_order_and_ignores_empty_entries():
    selection = parse_events(" task-clock, cycles = cyc ,, page-faults,")
    assert [(e.name, e.alias) for e in selection.events] == [
        ("task-clock", "task-clock"),
        ("cycles", "cyc"),
        ("page-faults", "page-faults"),
    ]
    assert selection.unavailable == ()


def test_sequence_of_event_strings():
    selection = parse_events(["instructions=inst", "task-clock,cs"])
    assert [(e.alias, e.type, e.config) for e in selection.events] == [
        ("inst", 0, 1),
        ("task-clock", 1, 1),
        ("cs", 1, 3),
    ]


def test_names_are_case_insensitive_and_keep_the_spelling_given():
    event = only("Task-Clock")
    assert (event.name, event.alias, event.type, event.config) == ("Task-Clock", "Task-Clock", 1, 1)


def test_raw_event():
    assert only("r01c2") == EventSpec("r01c2", "r01c2", 4, 0x1C2)
    assert only("r01C2=uops").alias == "uops"


@pytest.mark.parametrize("raw", ["r01g2", "r0x1c2", "r1" + "0" * 16])
def test_malformed_raw_event_is_a_config_error(raw):
    with pytest.raises(PerfConfigError, match=raw):
        parse_events(raw)


def test_unknown_name_suggests_a_close_one():
    selection = parse_events("task-clock,cylces")
    assert [e.name for e in selection.events] == ["task-clock"]
    assert selection.unavailable == (
        Unavailable("cylces", "cylces", "unknown event name 'cylces' (did you mean 'cycles'?)"),
    )


def test_unknown_name_without_a_close_one():
    (missing,) = parse_events("zzqqxx").unavailable
    assert missing.reason.startswith("unknown event name 'zzqqxx': ")
    assert "did you mean" not in missing.reason


@pytest.mark.parametrize("value", ["", " , ,", []])
def test_empty_selection_is_a_config_error(value):
    with pytest.raises(PerfConfigError, match="no perf events"):
        parse_events(value)


@pytest.mark.parametrize("value", ["cycles=c y c", "cycles=a/b", "cycles=", "cycles=perf.x:y"])
def test_bad_alias_is_a_config_error(value):
    with pytest.raises(PerfConfigError, match=r"invalid alias .* for perf event 'cycles'"):
        parse_events(value)


@pytest.mark.parametrize("value", ["page-faults=task-clock", "cycles=task-clock,page-faults"])
def test_an_alias_taking_the_time_alias_is_a_config_error(value):
    with pytest.raises(PerfConfigError, match="has the alias 'task-clock', the name of the on-CPU"):
        parse_events(value)
    assert parse_events("task-clock,page-faults").events  # task-clock itself, of course


def test_a_second_on_cpu_time_event_is_a_config_error():
    """It was dropped unsaid: neither counted nor said not counted."""
    with pytest.raises(
        PerfConfigError,
        match=r"perf events 'task-clock' \(alias 'task-clock'\) and 'task-clock' \(alias 'tc2'\) "
        "both count the thread's on-CPU time",
    ):
        parse_events("task-clock,page-faults,task-clock=tc2")


def test_alias_without_name_is_a_config_error():
    with pytest.raises(PerfConfigError, match="no event name"):
        parse_events("=cyc")


@pytest.mark.parametrize(
    "value", ["cycles=x,instructions=x", "cycles,cycles", "instructions=cycles,cycles"]
)
def test_duplicate_alias_is_a_config_error(value):
    with pytest.raises(PerfConfigError, match="duplicate perf event alias"):
        parse_events(value)


def test_same_event_twice_under_two_aliases_is_allowed():
    selection = parse_events("cycles,cpu-cycles")
    assert [(e.alias, e.config) for e in selection.events] == [("cycles", 0), ("cpu-cycles", 0)]


def test_default_event_names():
    assert default_event_names(False) == ("task-clock", "page-faults", "context-switches")
    assert default_event_names(True) == (
        "task-clock",
        "page-faults",
        "context-switches",
        "cycles",
        "instructions",
    )
    for has_pmu in (False, True):
        selection = parse_events(default_event_names(has_pmu))
        assert len(selection.events) == len(default_event_names(has_pmu))


# --- the per-layer perf-counter fork's JSON file ---------------------------------------------


@needs_libpfm
@pytest.mark.parametrize("path", [FORK_CONFIG, str(FORK_CONFIG)])
def test_fork_perf_config_json(path):
    selection = parse_events(path)
    assert selection.unavailable == ()
    assert [(e.name, e.alias, e.type, e.config, e.kind) for e in selection.events] == [
        ("perf::PERF_COUNT_HW_CPU_CYCLES", "cycles", 0, 0, "dense"),
        ("perf::PERF_COUNT_HW_INSTRUCTIONS", "instructions", 0, 1, "dense"),
        # the fork's README calls the dTLB read accesses "L1-dcache-loads": the alias is kept
        ("perf::PERF_COUNT_HW_CACHE_DTLB:READ:ACCESS", "L1-dcache-loads", 3, 3, "dense"),
    ]
    assert GENERIC_EVENTS["dTLB-loads"] == (3, 3)


def test_json_file_of_generic_names(tmp_path):
    path = tmp_path / "events.json"
    path.write_text(json.dumps({"task-clock": "cpu_time", "page-faults": "pf"}))
    selection = parse_events(path)
    assert [(e.alias, e.kind) for e in selection.events] == [("cpu_time", "time"), ("pf", "sparse")]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read"),
        ("{not json", "not valid JSON"),
        ('["cycles"]', "holds a JSON list"),
        ('{"cycles": 1}', "alias of 'cycles' is not a string"),
        ("{}", "no perf events"),
    ],
)
def test_bad_json_file_is_a_config_error(tmp_path, content, problem):
    path = tmp_path / "perf_config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PerfConfigError, match=problem) as info:
        parse_events(str(path))
    if content != "{}":
        assert str(path) in str(info.value)
        assert "JSON object mapping event name to alias" in str(info.value)


# --- libpfm4 ----------------------------------------------------------------------------------


@needs_libpfm
def test_libpfm_software_event_takes_the_generic_alias():
    event = only("perf::PAGE-FAULTS")
    assert event == EventSpec("perf::PAGE-FAULTS", "page-faults", 1, 2, kind="sparse")
    assert only("perf::TASK-CLOCK") == EventSpec(
        "perf::TASK-CLOCK", "task-clock", 1, 1, kind="time", unit="ns"
    )


@needs_libpfm
def test_libpfm_hardware_event_keeps_the_alias_given():
    event = only("perf::PERF_COUNT_HW_CPU_CYCLES=cpu_cycles")
    assert event == EventSpec("perf::PERF_COUNT_HW_CPU_CYCLES", "cpu_cycles", 0, 0)
    assert only("perf::PERF_COUNT_HW_CPU_CYCLES").alias == "cycles"
    assert only("perf::PERF_COUNT_HW_CACHE_L1D:READ:MISS").alias == "L1-dcache-load-misses"


@needs_libpfm
def test_libpfm_modifiers_are_not_aliases():
    event = only("perf::PERF_COUNT_HW_CPU_CYCLES:u=1")
    assert (event.name, event.alias, event.type, event.config) == (
        "perf::PERF_COUNT_HW_CPU_CYCLES:u=1",
        "cycles",
        0,
        0,
    )
    assert only("perf::PERF_COUNT_HW_CPU_CYCLES:u=1=cyc").alias == "cyc"


@needs_libpfm
def test_libpfm_modifiers_otel_ort_does_not_apply_are_refused():
    selection = parse_events("task-clock,perf::PAGE-FAULTS:k,perf::PAGE-FAULTS:u=pf")
    assert [(e.alias, e.type, e.config) for e in selection.events] == [
        ("task-clock", 1, 1),
        ("pf", 1, 2),  # user mode: counted as asked (plus kernel mode where allowed)
    ]
    (refused,) = selection.unavailable
    assert refused.reason == (
        "libpfm4 encodes 'perf::PAGE-FAULTS:k' with user mode excluded (:k), which otel-ort "
        "does not apply (it counts user mode, plus kernel mode where allowed): drop the modifier"
    )


@needs_libpfm
def test_libpfm_task_clock_beside_task_clock_is_a_config_error():
    with pytest.raises(PerfConfigError, match=r"and 'perf::TASK-CLOCK' \(alias 'tc2'\) both"):
        parse_events("task-clock,perf::TASK-CLOCK=tc2")


@needs_libpfm
def test_libpfm_unknown_event_is_unavailable():
    selection = parse_events("task-clock,nopmu::NO_SUCH_EVENT:X")
    assert [e.name for e in selection.events] == ["task-clock"]
    (missing,) = selection.unavailable
    assert (missing.name, missing.alias) == ("nopmu::NO_SUCH_EVENT:X", "nopmu_no_such_event_x")
    assert "'nopmu::NO_SUCH_EVENT:X'" in missing.reason
    assert "event not found" in missing.reason


@needs_libpfm
def test_libpfm_binding_directly():
    lib = pfm.load()
    assert lib is pfm.load()
    assert lib.encode("perf::PAGE-FAULTS") == pfm.Encoding(1, 2)
    with pytest.raises(pfm.PfmEventError, match="event not found"):
        lib.encode("perf::NO_SUCH_EVENT")


def test_missing_libpfm_makes_its_events_unavailable():
    selection = parse_events(
        "task-clock,perf::PAGE-FAULTS,perf::PERF_COUNT_HW_CPU_CYCLES=cyc",
        pfm_library=MISSING_LIBRARY,
    )
    assert [e.name for e in selection.events] == ["task-clock"]
    assert [(u.name, u.alias) for u in selection.unavailable] == [
        ("perf::PAGE-FAULTS", "page-faults"),
        ("perf::PERF_COUNT_HW_CPU_CYCLES", "cyc"),
    ]
    for missing in selection.unavailable:
        assert missing.reason.startswith(f"cannot encode event {missing.name!r}: ")
        assert "libpfm4 is not installed (apt install libpfm4" in missing.reason


def test_missing_libpfm_load_error():
    with pytest.raises(pfm.PfmUnavailableError, match=MISSING_LIBRARY):
        pfm.load(MISSING_LIBRARY)
