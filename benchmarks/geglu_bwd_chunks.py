"""GEGLU recompute fwd+bwd with the backward's row-chunk threshold at 256 MiB (the library's)
and at 64 MiB, alternately, in one process: time against peak memory.

    python benchmarks/geglu_bwd_chunks.py        (writes $OUT/c256/ and $OUT/c64/: the last run of each)

Each run is ``fusedmlp bench geglu --dtype bf16 --shapes 1024x8192,2048x16384 --impls
fused,liger,gemm --modes fwd+bwd`` with ``ops._common.BWD_CHUNK_BYTES`` set first; two runs of
each threshold, interleaved, so that drift between runs shows.
"""
import os

import fusedmlp.ops._common as common
from fusedmlp import cli

out = os.environ.get("OUT", ".")
for mib in (256, 64, 256, 64):
    common.BWD_CHUNK_BYTES = mib * 2**20
    cli.main(["bench", "geglu", "--dtype", "bf16", "--shapes", "1024x8192,2048x16384", "--impls", "fused,liger,gemm",
              "--modes", "fwd+bwd", "--out", f"{out}/c{mib}"])
