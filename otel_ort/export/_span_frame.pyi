from collections.abc import Callable

from otel_ort.profiles.span_draft import SpanDraft

def entries(drafts: list[SpanDraft], fallback: Callable[[SpanDraft], bytes]) -> list[bytes]: ...
