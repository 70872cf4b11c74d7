"""Reading the files otel-ort keeps (gzip-compressed Chrome-trace JSON) in tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

KEPT_GLOB = "otel-ort_*.json.gz"


def kept_document(path: str | Path) -> Any:
    """The kept file's JSON document."""
    return json.loads(gzip.decompress(Path(path).read_bytes()))
