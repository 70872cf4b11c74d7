"""One background thread that does profiling's slow work off the request path.

Jobs (converting a profiled run, deleting a dropped run's files) run in submission order.
The queue is bounded: ``submit`` refuses a job when ``max_pending`` are waiting or promised, and the
caller counts that. A caller that must not be refused later (a profiled run, whose profile
is about to exist) ``reserve``s a place first and submits into it, from the same thread.
``drain`` waits until everything submitted so far has run, and every place reserved has
been used or released but those of threads draining themselves (theirs are still on their
way to the queue, e.g. from ``response_hook``s that flush); ``stop`` drains, then ends the
thread (places the stopping thread reserved are not waited for either: it cannot use them
while it stops, and at exit, a place left by a run a ``KeyboardInterrupt`` ended is one of
the main thread's). The thread starts on the first job and is a daemon, so a process that
never calls ``stop`` can still exit (``atexit`` handlers drain first).

Between jobs the thread sleeps until a job, ``stop``, a drain or a released place wakes it.
It never looks at the queue by itself: in a service whose threads share the GIL, each such
look takes the GIL from a thread that was using it (see ``docs/decisions.md``). ``submit``
wakes it only while it runs no job.

After ``os.fork()`` the child must not inherit the parent's queue (its jobs belong to the
parent) nor its thread (gone in the child): ``reset_after_fork`` starts afresh.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from otel_ort._util.bounded import seconds_left
from otel_ort.failures import report_failure

Job = Callable[[], object]

DEFAULT_MAX_PENDING = 256


class Worker:
    """A lazily started background thread running submitted jobs one at a time."""

    def __init__(self, name: str, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self.name = name
        self.max_pending = max_pending
        self._fresh_state()

    def _fresh_state(self) -> None:
        self._jobs: deque[Job] = deque()
        self._lock = threading.RLock()
        """The condition's lock: the request thread's ``reserve`` and ``submit`` take it
        directly (``Condition``'s own ``with`` adds Python calls to a path that runs cold)."""
        self._condition = threading.Condition(self._lock)
        self._busy = False
        self._reserved_by: dict[int, int] = {}  # thread ident → places it reserved
        self._draining: set[int] = set()  # idents of the threads in drain()
        self._stopping = False
        self._stopper: int | None = None  # ident of the thread in stop()
        self._thread: threading.Thread | None = None

    def reserve(self) -> bool:
        """Promise a place in the queue to a job submitted later with ``reserved=True``;
        ``False`` when full or stopping. Give an unused place back with ``release``."""
        with self._lock:
            if not self._has_room():
                return False
            me = threading.get_ident()
            self._reserved_by[me] = self._reserved_by.get(me, 0) + 1
            return True

    def release(self) -> None:
        """Give back a reserved place that will not be used."""
        with self._condition:
            self._unreserve()
            self._condition.notify_all()

    @property
    def _reserved(self) -> int:
        return sum(self._reserved_by.values())

    @property
    def _promised(self) -> int:
        """Reserved places a stopping worker waits for: not those of the thread stopping it."""
        return self._reserved - self._reserved_by.get(self._stopper or 0, 0)

    def _unreserve(self) -> None:
        me = threading.get_ident()
        left = self._reserved_by.get(me, 0) - 1
        if left > 0:
            self._reserved_by[me] = left
        else:
            self._reserved_by.pop(me, None)

    def _has_room(self) -> bool:
        return not self._stopping and len(self._jobs) + self._reserved < self.max_pending

    def submit(self, job: Job, reserved: bool = False) -> bool:
        """Queue ``job`` (into a reserved place, which is never refused); ``False`` when the
        queue is full or the worker is stopping, or when its thread cannot start."""
        with self._lock:
            if reserved:
                self._unreserve()
            elif not self._has_room():
                return False
            if self._thread is None and not self._start():
                self._condition.notify_all()  # a reserved place was given back: drains end
                return False
            self._jobs.append(job)
            if not self._busy:  # it sleeps, or is about to look at the queue
                self._condition.notify_all()
            return True

    def _start(self) -> bool:
        """Start the thread (holding ``_condition``); ``False``, and logged, if it cannot."""
        thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": a process or memory limit
            report_failure(f"could not start the {self.name} thread")
            return False
        self._thread = thread
        return True

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no job is queued or running; ``False`` on timeout."""
        with self._condition:
            if self._thread is threading.current_thread():
                return not self._jobs  # a job cannot wait for itself
            me = threading.get_ident()
            self._draining.add(me)
            self._condition.notify_all()  # other drainers stop waiting for this one's places
            try:
                return self._condition.wait_for(self._idle, timeout)
            finally:
                self._draining.discard(me)

    def _idle(self) -> bool:
        drainers = sum(self._reserved_by.get(ident, 0) for ident in self._draining)
        return not self._jobs and not self._busy and self._reserved == drainers

    def stop(self, timeout: float | None = None) -> bool:
        """Run what is queued or reserved, then end the thread; ``False`` if it did not end in
        time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            self._stopping = True
            self._stopper = threading.get_ident()
            self._condition.notify_all()
            if self._thread is None:  # a job for a reserved place may yet start it
                # (the started thread's loop notifies first thing: this wait then ends)
                self._condition.wait_for(
                    lambda: self._thread is not None or not self._promised, timeout
                )
            thread = self._thread
        if thread is None:
            return not self._promised
        if thread is threading.current_thread():
            return True
        thread.join(None if deadline is None else seconds_left(deadline))
        return not thread.is_alive()

    @property
    def pending(self) -> int:
        """Jobs queued and not yet started."""
        return len(self._jobs)

    @property
    def unfinished(self) -> int:
        """Jobs queued, running, or promised a place."""
        return len(self._jobs) + self._busy + self._reserved

    def reset_after_fork(self) -> None:
        """In a forked child: forget the parent's jobs and thread."""
        self._fresh_state()

    def _loop(self) -> None:
        while True:
            with self._condition:
                self._busy = False
                self._condition.notify_all()
                while not (self._jobs or (self._stopping and not self._promised)):
                    self._condition.wait()
                if not self._jobs:  # stopping, and nothing left or promised
                    self._thread = None
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                job()
            except BaseException:  # SystemExit from a span processor, say: the thread goes on
                report_failure(f"a background job of {self.name} failed")
