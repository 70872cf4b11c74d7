from types import NotImplementedType
from typing import Any

from numpy import bool_, int64
from numpy.typing import NDArray

def recent_records(
    data: bytes, since: int, until: int
) -> tuple[list[tuple[int, bool]], dict[int, list[int]], bool] | NotImplementedType: ...
def trimmed_records(
    data: bytes, since: int, until: int
) -> tuple[bytes, bool] | NotImplementedType: ...
def reaches_back(data: bytes, since: int, switches: bool) -> bool | NotImplementedType: ...
def node_dicts(
    value_keys: tuple[str, ...],
    split_keys: tuple[str, ...],
    ids_key: str,
    tids: tuple[int, ...],
    ints: NDArray[int64],
    on_cpu: NDArray[bool_],
    uncounted: NDArray[bool_],
) -> list[Any]: ...  # per node, its attributes (None where uncounted)
