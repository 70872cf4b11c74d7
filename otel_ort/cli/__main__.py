"""``python -m otel_ort.cli``: the ``otel-ort`` command."""

from otel_ort.cli import main

raise SystemExit(main())
