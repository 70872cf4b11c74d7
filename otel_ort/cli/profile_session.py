"""``otel-ort profile``'s session: the model's ``onnxruntime.InferenceSession`` with what its
profiled runs and perf counting need, and the command's two failures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from otel_ort.profiling.run_options import LayoutChanged, RunProfilingSwitch


class UserError(Exception):
    """Something the user asked for cannot be done; the message names it and the fix."""


class ModelFailed(Exception):
    """ORT failed a run on the inputs built or given (its message)."""


@dataclass(frozen=True)
class CommandSession:
    """The profiled ``onnxruntime.InferenceSession``, with what perf counting needs of it."""

    session: Any
    switch: RunProfilingSwitch
    version: str
    pool_threads: tuple[int, ...]
    """OS ids of the threads ORT started for the session (its intra-op pool): the process's
    new threads while it was made, less Python's (another library's would be counted too)."""
    sequential: bool
    """Nodes run one at a time, each on the thread that called ``run``."""

    def options(self, prefix: str) -> Any:
        """A fresh ``RunOptions`` profiling its run into ``<prefix>_<time>.json``."""
        import onnxruntime

        options = onnxruntime.RunOptions()
        try:
            self.switch.enable(options, prefix)
        except LayoutChanged as exc:
            raise UserError(f"run-level profiling could not be switched on: {exc}") from None
        return options

    def run(self, feeds: dict[str, Any], options: Any = None) -> None:
        """One run; ``ModelFailed`` with ORT's message if it fails."""
        try:
            self.session.run(None, feeds, options)
        except Exception as exc:  # ORT's own exception types
            raise ModelFailed(str(exc)) from None
