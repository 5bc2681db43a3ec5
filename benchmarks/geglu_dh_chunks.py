"""GEGLU recompute fwd+bwd with dh formed in row chunks or in column chunks: time against peak.

    python benchmarks/geglu_dh_chunks.py [SHAPES] [PLANS]     (JSON to $OUT/geglu_dh_chunks.json)

SHAPES: d x N, comma-separated (default 1024x8192,2048x16384,4096x8192,1024x32768). PLANS:
comma-separated ``lib`` (the library's rule), ``rC`` (C row chunks) or ``cC`` (C column
chunks of the output, the recompute mode's other choice), default lib,c2,c3,c4,c5,c6,r4,r5.
Each shape times every plan twice, interleaved (``fwd+bwd`` as ``fusedmlp bench geglu`` does,
with ``ops.glu._dh_chunks`` replaced by the plan's), beside three bare cuBLAS GEMMs of the shape
(the floor).
"""
import json
import os
import sys

import torch
import triton

import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import environment, measure
from fusedmlp.bench.suites.glu import _gemm_steps, _make_inputs

library_rule = glu._dh_chunks


def plan_of(name):
    """The ``_dh_chunks`` of a plan: C equal ranges (columns in multiples of 128, rows of 128)."""
    if name == "lib":
        return library_rule
    by_columns, count = name[0] == "c", int(name[1:])

    def chunks(m, out, row_bytes, columns_allowed):
        if by_columns and columns_allowed:
            return True, glu.column_ranges(out, count)
        rows = triton.cdiv(triton.cdiv(m, count), 128) * 128
        return False, [(start, min(start + rows, m)) for start in range(0, m, rows)]
    return chunks


def main():
    shapes = [tuple(int(v) for v in s.split("x")) for s in
              (sys.argv[1] if len(sys.argv) > 1 else "1024x8192,2048x16384,4096x8192,1024x32768").split(",")]
    plans = (sys.argv[2] if len(sys.argv) > 2 else "lib,c2,c3,c4,c5,c6,r4,r5").split(",")
    rows = []
    for d, n in shapes:
        inputs, g = _make_inputs((d, n), torch.bfloat16)
        floor_ms, _, _ = measure(None, "fwd+bwd", inputs, g, steps=_gemm_steps(inputs, g))
        forward = lambda x, w, b: glu.geglu(x, w, b, recompute=True)  # noqa: E731
        for repeat in range(2):
            for name in plans:
                glu._dh_chunks = plan_of(name)
                ms, peak, _ = measure(forward, "fwd+bwd", inputs, g)
                rows.append({"d": d, "N": n, "plan": name, "repeat": repeat, "ms": ms, "peak_mib": peak,
                             "floor_ms": floor_ms, "ratio": ms / floor_ms})
                print(f"{d:5d} {n:6d} {name:4s} {ms:8.3f} ms {ms / floor_ms:6.3f}x floor {peak:7.0f} MiB", flush=True)
        glu._dh_chunks = library_rule
        del inputs, g
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    command = "python benchmarks/geglu_dh_chunks.py " + " ".join(sys.argv[1:])
    with open(os.path.join(out, "geglu_dh_chunks.json"), "w") as f:
        json.dump({"env": dict(environment(), command=command), "command": command, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
