"""A plain ONNX Runtime script: not one line of OpenTelemetry. See README.md for running it
under ``opentelemetry-instrument``, which traces (and profiles) it as it is.

    python app.py [model.onnx] [--runs 30] [--interval 0.05]

It loads the model (default: otel-ort's demo MLP, built with the ``onnx`` package) and runs
it ``--runs`` times on a batch of ones, ``--interval`` seconds apart (standing in for the rest
of an application's work between inferences).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort


def main() -> None:
    parser = argparse.ArgumentParser(description="Run an ONNX model a few times.")
    parser.add_argument("model", nargs="?", help="ONNX model with one float32 input")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between runs")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    if args.model:
        model = args.model
    else:  # no model at hand: otel-ort's demo MLP (plain onnx, no OpenTelemetry)
        from otel_ort.demo_model import mlp_model

        model = mlp_model(width=256, depth=4)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    shape = [dim if isinstance(dim, int) else 1 for dim in first.shape]
    batch = np.ones(shape, np.float32)
    for run in range(args.runs):
        if run:
            time.sleep(args.interval)
        outputs = session.run(None, {first.name: batch})
    output = session.get_outputs()[0].name
    print(f"ran {args.runs} runs: {output} {outputs[0].dtype}{list(outputs[0].shape)}")


if __name__ == "__main__":
    main()
