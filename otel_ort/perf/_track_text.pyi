from types import NotImplementedType

def counter_text(
    templates: list[tuple[bytes, bytes]],
    starts: list[float],
    stops: list[float],
    rows: list[list[int | None]],
) -> bytes | NotImplementedType: ...
