"""The report page: one self-contained HTML file, its script, style and data inline.

The Content-Security-Policy forbids every fetch (``default-src 'none'``); the one script
runs because its hash is allowed, styles are inline, images may only be ``data:`` URLs.
The data sits in a ``<script type="application/json">`` element, ``<``, ``>`` and ``&``
escaped, so no text in a profile (node names) can end the element or run as markup.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from importlib import resources
from typing import Any

from otel_ort.report.page_data import PageData, ReportError

_ASSETS = "static"
_JSON_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


@cache
def asset(name: str) -> str:
    """A file of the page (``report.js``, ``report.css``, ``report.html``) shipped in the
    package; ``ReportError`` when the installation lacks it."""
    try:
        return (
            resources.files("otel_ort.report").joinpath(_ASSETS).joinpath(name).read_text("utf-8")
        )
    except OSError as exc:
        raise ReportError(
            f"this otel-ort installation lacks its report files (otel_ort/report/{_ASSETS}/"
            f"{name}: {exc.strerror or exc}): reinstall otel-ort"
        ) from None


def content_security_policy(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )


def embedded_json(data: Any) -> str:
    """``data`` as JSON that cannot close the script element holding it."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).translate(_JSON_ESCAPES)


def render_page(page: PageData) -> str:
    script = asset("report.js")
    title = html.escape(f"{page.data['file']} · otel-ort report")
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
            '<meta http-equiv="Content-Security-Policy" content="',
            html.escape(content_security_policy(script), quote=False),
            '">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n',
            '<meta name="generator" content="otel-ort ',
            html.escape(str(page.data["version"])),
            '">\n<link rel="icon" href="data:,">\n<title>',
            title,
            "</title>\n<style>\n",
            asset("report.css"),
            "</style>\n</head>\n<body>\n",
            asset("report.html"),
            '<script type="application/json" id="report-data">',
            embedded_json(page.data),
            "</script>\n<script>",
            script,
            "</script>\n</body>\n</html>\n",
        ]
    )
