from types import NotImplementedType
from typing import Any

class Encoder:
    def __init__(
        self,
        *,
        names: dict[str, tuple[bytes, bytes]],
        op_types: dict[Any, bytes],
        providers: dict[Any, bytes],
        pools: dict[Any, bytes],
        raw: dict[str, dict[bytes, bytes] | None],
        extra: dict[str, tuple[bytes, dict[int | tuple[int, ...], bytes]]],
        duration_key: bytes,
        thread_id_key: bytes,
        run_key: bytes,
        wait_key: bytes,
        used_key: bytes,
        tasks_key: bytes,
        end: bytes,
        raw_args_type: type,
        stats_arg: str,
        handlers: dict[str, tuple[int, bytes, dict[Any, bytes]]],
        int_kind: int,
    ) -> None: ...
    def parts(
        self, node: Any, extra: Any, max_attributes: int | None
    ) -> tuple[bytes, bytes] | NotImplementedType | None: ...
    def draft(
        self,
        node: Any,
        extra: Any,
        max_attributes: int | None,
        base: int,
        trace_id: int,
        parent_id: int,
        kit: tuple[Any, ...],
    ) -> tuple[Any, int] | NotImplementedType: ...
