"""The profile directory: safety checks, naming, publishing, retention; the enriched Chrome JSON;
the background worker."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from otel_ort.profiles import chrome
from otel_ort.profiles.reader import read_profile
from otel_ort.profiling.store import ProfileDirError, ProfileStore, prepare_dir
from otel_ort.profiling.worker import Worker
from tests.helpers.profiles import model_run, node_event


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_missing_directory_is_created_0700(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "profiles"
    assert prepare_dir(str(directory)) == str(directory)
    assert mode(directory) == 0o700
    assert mode(directory / ".pending") == 0o700


def test_processes_creating_the_directory_at_once_all_get_it(tmp_path: Path) -> None:
    """Pre-forked servers' workers call ``instrument()`` together."""
    context = multiprocessing.get_context("fork")
    for round_ in range(10):  # the window is microseconds wide: one round may miss it
        start = context.Barrier(4)
        directory = str(tmp_path / f"profiles-{round_}")

        def create() -> None:
            start.wait()  # noqa: B023 (each round's processes start and end in that round)
            prepare_dir(directory)  # noqa: B023

        workers = [context.Process(target=create) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        assert [worker.exitcode for worker in workers] == [0, 0, 0, 0], f"round {round_}"


def test_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("")
    with pytest.raises(ProfileDirError) as error:
        prepare_dir(str(tmp_path / "notes" / "a" / "profiles"))
    assert f"(Not a directory: {str(tmp_path / 'notes')!r} is a file)" in str(error.value)


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ProfileDirError, match="is a symbolic link; refusing it"):
        prepare_dir(str(tmp_path / "link"))


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/")  # owned by root
    with pytest.raises(ProfileDirError, match=r"is owned by uid .* not by this user"):
        prepare_dir(str(theirs))


def test_a_directory_open_to_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(ProfileDirError, match="chmod 700"):
        prepare_dir(str(shared))


def test_a_parent_anyone_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    (tmp_path / "via").symlink_to(open_parent)
    for given in (open_parent / "profiles", tmp_path / "via" / "profiles"):
        with pytest.raises(ProfileDirError) as error:
            prepare_dir(str(given))
        assert f"is inside {str(open_parent)!r}, which anyone can write" in str(error.value)
        assert f"chmod o-w {open_parent}" in str(error.value)
    open_parent.chmod(0o1777)  # as /tmp: only a directory's owner may rename it
    assert prepare_dir(str(open_parent / "profiles")) == str(open_parent / "profiles")


def test_a_parent_its_group_can_write_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    team.chmod(0o775)
    assert prepare_dir(str(team / "profiles")) == str(team / "profiles")
    ProfileStore(str(team / "profiles"), 10, 10**9)  # as instrument(): checked twice
    assert caplog.text.count(f"is inside {str(team)!r}, which its group (gid") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_parent_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "profiles").mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ProfileDirError, match=r"is inside .*, owned by uid 65534, who could"):
        prepare_dir(str(theirs / "profiles"))


def test_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ProfileDirError, match="is not a directory"):
        prepare_dir(str(tmp_path / "file"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a read-only directory")
def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ProfileDirError, match="cannot be written"):
        prepare_dir(str(locked))


def test_runs_get_unique_names_and_published_files_are_0600(tmp_path: Path) -> None:
    store = ProfileStore(str(tmp_path / "p"), max_files=10, max_bytes=10**9)
    first, second = store.new_run(), store.new_run()
    assert first.prefix != second.prefix and first.path != second.path
    Path(first.prefix + "_2026-11-22_10-00-00_000.json").write_text("[]")
    assert store.written(first) == [first.prefix + "_2026-11-22_10-00-00_000.json"]
    assert store.written(second) == []
    tenth = [store.new_run() for _ in range(8)][-1]  # its prefix starts with the first's
    Path(tenth.prefix + "_2026-11-22_10-00-01_000.json").write_text("[]")
    Path(first.prefix + "_2026-11-22_10-00-02_000.json.part").write_text("")
    assert store.written(first) == [first.prefix + "_2026-11-22_10-00-00_000.json"]
    assert store.written(tenth) == [tenth.prefix + "_2026-11-22_10-00-01_000.json"]
    store.publish(b"[]", first.path)
    assert mode(first.path) == 0o600
    assert os.path.basename(first.path).startswith("otel-ort_")


def test_stores_of_processes_sharing_a_pid_name_their_files_apart(tmp_path: Path) -> None:
    """Two processes with one pid (each in its own pid namespace, sharing the volume)."""
    first = ProfileStore(str(tmp_path), max_files=10, max_bytes=10**9).new_run()
    second = ProfileStore(str(tmp_path), max_files=10, max_bytes=10**9).new_run()
    assert first.prefix != second.prefix and first.path != second.path
    Path(first.prefix + "_2026-11-22_10-00-00_000.json").write_text("[]")
    assert ProfileStore.written(second) == []


def age(path: Path) -> None:
    """Make ``path`` look written an hour ago."""
    then = time.time() - 3601
    os.utime(path, (then, then))


def store_process(directory: Path) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """Another process with a store of ``directory``, waiting for its stdin to close; and
    the names of 3 of its runs: 2 raw files, the temporary of a published one."""
    script = (
        "import sys; from otel_ort.profiling.store import ProfileStore\n"
        "store = ProfileStore(sys.argv[1], 10, 10**9)\n"
        "runs = [store.new_run() for _ in range(3)]\n"
        "print(runs[0].prefix + '_t.json', runs[1].prefix + '_t.json', runs[2].path + '.tmp',"
        " flush=True)\n"
        "sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    return process, [Path(name) for name in process.stdout.readline().decode().split()]


def test_leftovers_of_ended_processes_are_deleted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    process, [old, recent, temporary] = store_process(tmp_path)
    process.kill()  # its lock file stays; the lock is free
    assert process.wait(timeout=30) == -signal.SIGKILL
    [lock] = (tmp_path / ".pending").glob("*alive")
    probe = tmp_path / ".pending" / "probe-7-0a0b0c0d"  # of a check killed in its middle
    for path in (old, recent, temporary, probe):
        path.write_text("[]")
    for path in (old, temporary, probe, lock):
        age(path)
    with caplog.at_level("INFO", logger="otel_ort"):
        ProfileStore(str(tmp_path), max_files=10, max_bytes=10**9)
    assert [path.exists() for path in (old, temporary, recent)] == [False, False, True]
    assert not probe.exists() and not lock.exists()
    assert "deleted 2 raw or temporary profile file(s)" in caplog.text


def test_old_files_of_a_live_process_are_kept(tmp_path: Path) -> None:
    """``otel-ort profile`` keeps each run's raw file until its last run, maybe for hours."""
    process, files = store_process(tmp_path)
    for path in files:
        path.write_text("[]")
        age(path)
    ProfileStore(str(tmp_path), max_files=10, max_bytes=10**9)
    assert all(path.exists() for path in files)
    assert process.stdin is not None
    process.stdin.close()  # it ends: its lock file goes
    assert process.wait(timeout=30) == 0
    assert not list((tmp_path / ".pending").glob("*alive"))
    ProfileStore(str(tmp_path), max_files=10, max_bytes=10**9)
    assert not any(path.exists() for path in files)


def test_directory_checks_at_once_in_threads_all_pass(tmp_path: Path) -> None:
    """Each check writes its own probe file (one per pid collided between threads)."""
    prepare_dir(str(tmp_path / "p"))
    errors: list[BaseException] = []

    def check() -> None:
        for _ in range(200):
            try:
                prepare_dir(str(tmp_path / "p"))
            except ProfileDirError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=check) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_retention_deletes_the_oldest_files_and_counts_them(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    user_file = directory / "notes.json"
    store = ProfileStore(str(directory), max_files=3, max_bytes=10**9)
    user_file.write_text("mine")
    paths = []
    for _ in range(5):
        run = store.new_run()
        store.publish(b"[]", run.path)
        paths.append(run.path)
        store.retain(run.path)
        time.sleep(0.01)
    assert [os.path.exists(p) for p in paths] == [False, False, True, True, True]
    assert store.deleted == 2
    assert user_file.exists()  # never touches files it did not write
    by_bytes = ProfileStore(str(directory), max_files=100, max_bytes=5)  # sees the 3 kept files
    run = by_bytes.new_run()
    by_bytes.publish(b"[1,2]", run.path)
    assert by_bytes.retain(run.path) == 3
    assert os.path.exists(run.path)  # the newest file is kept even over the byte limit


def test_retention_counts_only_the_files_it_deleted(tmp_path: Path) -> None:
    """A file already gone (deleted by hand, or by a forked sibling sharing the list) is not
    counted again."""
    store = ProfileStore(str(tmp_path / "p"), max_files=1, max_bytes=10**9)
    first, second = store.new_run(), store.new_run()
    store.publish(b"[]", first.path)
    store.retain(first.path)
    os.unlink(first.path)
    store.publish(b"[]", second.path)
    assert store.retain(second.path) == 0 and store.deleted == 0


def test_retention_goes_on_past_a_file_it_cannot_delete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ProfileStore(str(tmp_path / "p"), max_files=1, max_bytes=10**9)
    runs = [store.new_run() for _ in range(3)]
    store.publish(b"[]", runs[0].path)
    store.retain(runs[0].path)
    os.unlink(runs[0].path)
    os.mkdir(runs[0].path)  # in the way: unlink fails with EISDIR
    store.publish(b"[]", runs[1].path)
    assert store.retain(runs[1].path) == 0
    store.publish(b"[]", runs[2].path)
    assert store.retain(runs[2].path) == 1 and store.deleted == 1
    assert not os.path.exists(runs[1].path)
    assert f"cannot delete {runs[0].path} (Is a directory)" in caplog.text


def test_enriched_json_names_threads_and_carries_the_trace(tmp_path: Path) -> None:
    events = [
        node_event("fc1", "Gemm", 10, 5) | {"pid": 42, "tid": 7},
        model_run(0, 20) | {"pid": 42, "tid": 7},
    ]
    data = chrome.enrich(
        events,
        other_data={"trace_id": "ab" * 16, "span_id": "cd" * 8, chrome.START_TIME_KEY: 10**18},
        process_name="onnxruntime (pid 42)",
        thread_names={7: "MainThread (run)"},
    )
    document = json.loads(data)
    meta = [e for e in document["traceEvents"] if e["ph"] == "M"]
    assert {(e["name"], e["args"]["name"]) for e in meta} == {
        ("process_name", "onnxruntime (pid 42)"),
        ("thread_name", "MainThread (run)"),
    }
    run_event = next(e for e in document["traceEvents"] if e["name"] == "model_run")
    assert run_event["args"]["trace_id"] == "ab" * 16
    path = tmp_path / "enriched.json"
    path.write_bytes(data)
    profile = read_profile(path)
    assert (profile.start_ns, profile.start_source) == (10**18, "file")
    assert [node.name for node in profile.runs[0].nodes] == ["fc1"]


def test_worker_runs_jobs_in_order_drains_and_stops() -> None:
    worker = Worker("test-worker", max_pending=100)
    done: list[int] = []
    for number in range(20):
        assert worker.submit(functools.partial(done.append, number))
    assert worker.drain(timeout=10)
    assert done == list(range(20))
    assert worker.stop(timeout=10)
    assert not worker.submit(lambda: None)
    assert "test-worker" not in {t.name for t in threading.enumerate()}


def test_an_idle_worker_sleeps_until_a_job_wakes_it() -> None:
    """Between jobs the thread waits for ``submit`` and never looks at the queue by itself:
    each look would take the GIL from the service's threads. A job submitted to it starts
    at once, however long it slept."""
    worker = Worker("test-worker", max_pending=10)
    done = threading.Event()
    try:
        assert worker.submit(done.set) and done.wait(timeout=5)  # starts the thread
        assert worker.drain(timeout=10)
        thread = worker._thread
        assert thread is not None and thread.native_id is not None
        # drain() may return just before the thread blocks: wait until it has gone to sleep
        readings = [_voluntary_switches(thread.native_id)]
        while len(readings) < 50 and not (len(readings) >= 3 and len(set(readings[-3:])) == 1):
            time.sleep(0.1)
            readings.append(_voluntary_switches(thread.native_id))
        switches = readings[-1]
        time.sleep(0.5)
        assert _voluntary_switches(thread.native_id) == switches  # asleep: never woke
        done.clear()
        submitted = time.monotonic()
        assert worker.submit(done.set) and done.wait(timeout=5)
        assert time.monotonic() - submitted < 1.0
    finally:
        worker.stop(timeout=10)


def _voluntary_switches(native_id: int) -> int:
    """How often thread ``native_id`` of this process has gone to sleep so far."""
    with open(f"/proc/self/task/{native_id}/status") as status:
        line = next(line for line in status if line.startswith("voluntary_ctxt_switches:"))
    return int(line.split()[1])


def test_threads_draining_while_holding_places_do_not_wait_for_each_other() -> None:
    """Two profiled runs whose ``response_hook``s flush: each holds a place it will use only
    once its hook returns, so neither may wait for the other's."""
    worker = Worker("test-worker", max_pending=10)
    meet = threading.Barrier(2)
    results: list[bool] = []

    def hook_flushing() -> None:
        assert worker.reserve()
        meet.wait(timeout=10)
        results.append(worker.drain(timeout=10))
        assert worker.submit(lambda: None, reserved=True)

    started = time.monotonic()
    threads = [threading.Thread(target=hook_flushing) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True, True] and time.monotonic() - started < 5
    assert worker.drain(timeout=10) and worker.stop(timeout=10)


def test_a_full_worker_refuses_jobs_and_survives_failing_ones() -> None:
    gate = threading.Event()

    def wait() -> None:
        gate.wait()

    def fail() -> None:
        raise ZeroDivisionError

    worker = Worker("test-worker", max_pending=2)
    assert worker.submit(wait)
    time.sleep(0.05)  # the first job is running
    assert worker.submit(fail)
    assert worker.submit(lambda: None)
    assert not worker.submit(lambda: None)
    gate.set()
    assert worker.drain(timeout=10)
    assert worker.stop(timeout=10)


def test_a_worker_whose_thread_cannot_start_refuses_jobs_then_recovers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under a process limit ``Thread.start`` raises: no job is queued for a thread that does
    not exist (drain and stop would wait for it forever), and it says so; a drain already
    waiting for the reserved place is woken when the place is given back."""
    worker = Worker("test-worker", max_pending=10)
    start = threading.Thread.start

    def refuse(thread: threading.Thread) -> None:
        if thread.name == "test-worker":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert worker.reserve()
    drained: list[bool] = []
    waiting = threading.Thread(target=lambda: drained.append(worker.drain(timeout=30)))
    waiting.start()
    time.sleep(0.1)  # waiting in drain(), for the reserved place
    began = time.monotonic()
    assert not worker.submit(lambda: None, reserved=True)
    waiting.join(timeout=30)
    assert drained == [True] and time.monotonic() - began < 10
    assert not worker.submit(lambda: None)
    assert worker.unfinished == 0 and worker.drain(timeout=1)
    assert "could not start the test-worker thread" in caplog.text
    monkeypatch.setattr(threading.Thread, "start", start)
    done: list[int] = []
    assert worker.submit(functools.partial(done.append, 1))
    assert worker.drain(timeout=10) and done == [1] and worker.stop(timeout=10)


def test_stop_before_the_thread_started_runs_the_job_of_a_reserved_place() -> None:
    """A first profiled run racing the shutdown: stop() waits for the job its place was
    promised to (within its timeout), runs it, and only then reports the worker stopped."""
    worker = Worker("test-worker", max_pending=10)
    reserved = threading.Event()
    done: list[str] = []

    def first_profiled_run() -> None:  # the same thread reserves, then submits
        assert worker.reserve()
        reserved.set()
        time.sleep(0.2)  # the run, during which stop() is called
        worker.submit(lambda: done.append("converted"), reserved=True)

    run = threading.Thread(target=first_profiled_run)
    run.start()
    assert reserved.wait(timeout=10)
    assert worker.stop(timeout=10)
    run.join()
    assert done == ["converted"]
    never = Worker("test-worker", max_pending=10)
    holder = threading.Thread(target=never.reserve)
    holder.start()
    holder.join()
    assert not never.stop(timeout=0.1)  # another thread's job never came: said, not hidden


def test_stop_does_not_wait_for_places_its_own_thread_reserved() -> None:
    """At exit the main thread stops the worker: a place it reserved for a profiled run that
    a KeyboardInterrupt ended before the hand-off will never be used."""
    worker = Worker("test-worker", max_pending=10)
    assert worker.submit(lambda: None)  # the thread runs
    assert worker.reserve()  # then the interrupt: nothing is submitted into it
    started = time.monotonic()
    assert worker.stop(timeout=10)
    assert time.monotonic() - started < 5
    assert "test-worker" not in {t.name for t in threading.enumerate()}


def test_the_docs_give_the_kept_file_names_the_store_makes(tmp_path: Path) -> None:
    """``otel-ort_<time>_<pid>-<random>-<n>.json``, as docs/profiling.md and the examples say."""
    root = Path(__file__).resolve().parent.parent
    documented = "otel-ort_<time>_<pid>-<random>-<n>.json.gz"
    for doc in ("docs/profiling.md", "examples/README.md", "examples/batch_profile.py"):
        names = set(
            re.findall(r"otel-ort_<time>_[<>a-z-]+\.json(?:\.gz)?", (root / doc).read_text())
        )
        assert names == {documented}, (doc, names)
    store_dir = tmp_path / "profiles"
    store_dir.mkdir(mode=0o700)
    name = os.path.basename(ProfileStore(str(store_dir), 10, 10**9).new_run().path)
    pattern = r"otel-ort_\d{8}-\d{6}_(?P<pid>\d+)-[0-9a-f]+-(?P<n>\d+)\.json\.gz"
    found = re.fullmatch(pattern, name)
    assert found and int(found["pid"]) == os.getpid() and found["n"] == "1", name
