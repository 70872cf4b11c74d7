"""Real OTLP receivers (``tests/helpers/otlp_receiver.py``) in a process of their own, so that what
receiving costs is not counted in the process a bench measures.

    python -m bench.otlp_sink N   # prints N gRPC endpoints (JSON), then one line of counts
                                  # (JSON) per line read on stdin; ends at end of input
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.otlp_receiver import OtlpReceiver

RUN_SPAN = "onnxruntime.run"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Received:
    """What one receiver has taken so far."""

    spans: int
    run_spans: int
    """``onnxruntime.run`` spans among them."""


class SinkProcess:
    """``with SinkProcess(n) as sink:`` starts ``n`` receivers in a child process;
    ``sink.endpoints`` are their gRPC endpoints, ``sink.received()`` what each has taken."""

    def __init__(self, receivers: int = 1) -> None:
        if receivers < 1:
            raise ValueError(f"receivers must be at least 1, got {receivers}")
        self._count = receivers
        self.endpoints: list[str] = []
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> SinkProcess:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.otlp_sink", str(self._count)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.endpoints = json.loads(self._line())
        return self

    def received(self) -> list[Received]:
        """Counts of each receiver, in ``endpoints`` order."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write("\n")
        self._process.stdin.flush()
        return [Received(*counts) for counts in json.loads(self._line())]

    def _line(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the OTLP sink process ended (exit {self._process.poll()})")
        return line

    def __exit__(self, *exc: object) -> None:
        if self._process is None:
            return
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _counts(receiver: OtlpReceiver) -> list[int]:
    spans = [span for _, span in receiver.spans()]
    return [len(spans), sum(span.name == RUN_SPAN for span in spans)]


def main() -> None:
    count = int(sys.argv[1])
    with ExitStack() as stack:
        receivers = [stack.enter_context(OtlpReceiver()) for _ in range(count)]
        print(json.dumps([receiver.grpc_endpoint for receiver in receivers]), flush=True)
        for _ in sys.stdin:
            print(json.dumps([_counts(receiver) for receiver in receivers]), flush=True)


if __name__ == "__main__":
    main()
