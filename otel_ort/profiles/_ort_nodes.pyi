from collections.abc import Callable
from typing import Any

def node_records(
    events: list[Any],
    nodes: list[Any],
    texts: dict[bytes, str],
    other: Callable[[Any], None],
    node_type: type,
    args_type: type,
) -> None: ...
