from types import NotImplementedType
from typing import Any

from numpy import bool_, float64, int64
from numpy.typing import NDArray

def recent_records(
    data: bytes, since: int, until: int
) -> tuple[list[tuple[int, bool]], dict[int, list[int]], bool] | NotImplementedType: ...
def trimmed_records(
    data: bytes, since: int, until: int
) -> tuple[bytes, bool] | NotImplementedType: ...
def reaches_back(data: bytes, since: int, switches: bool) -> bool | NotImplementedType: ...
def thread_values(
    switches: list[tuple[int, bool]],
    begin: int,
    end: int,
    running: bool,
    origin: int,
    starts: NDArray[float64],
    ends: NDArray[float64],
    outermost: NDArray[bool_],
    aliases: tuple[tuple[int, list[int] | None, bool], ...],
) -> list[tuple[bytearray, float, float]] | NotImplementedType: ...
def node_dicts(
    value_keys: tuple[str, ...],
    split_keys: tuple[str, ...],
    ids_key: str,
    tids: tuple[int, ...],
    ints: NDArray[int64],
    on_cpu: NDArray[bool_],
    uncounted: NDArray[bool_],
) -> list[Any]: ...  # per node, its attributes (None where uncounted)
