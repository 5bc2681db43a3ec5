"""Tile-configuration tables and the launcher that applies them.

On a GPU each kernel is autotuned over a short list of configs, keyed on the problem sizes
(the M key is rounded to a power of two so that a new batch size does not re-tune); the
result is cached by Triton for the process. The Triton interpreter cannot autotune over
several configs, and its cost is per program, not per element, so it runs one fixed config.

BLOCK_M of kernels that write per-row-block partial results is fixed (not tuned): the host
sizes the partial buffer from it before launch.
"""

import os

import triton

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
# FUSEDMLP_AUTOTUNE=0 launches the first config of each table instead of tuning (compiles one
# config per specialisation: the GPU test suite uses it to stay fast).
AUTOTUNE = os.environ.get("FUSEDMLP_AUTOTUNE", "1") not in ("", "0")

# Paired (GLU) GEMM tiles: two fp32 accumulators of BLOCK_M x BLOCK_N each.
GLU_GEMM_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=4),
]
# Backward dh kernel: BLOCK_M fixed (db partials), the rest tuned.
GLU_BWD_BLOCK_M = 128
GLU_BWD_CONFIGS = [
    triton.Config({"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=4),
]
# fp64 on GPU: no tensor cores and 8-byte elements; small tiles keep it out of local memory.
FP64_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
# The interpreter's cost is per program: larger tiles, one config.
INTERPRET_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


class Launcher:
    """Launch ``kernel`` with autotuned configs on a GPU and a fixed config elsewhere.

    ``fixed`` holds meta-parameters every config shares (e.g. a BLOCK_M the host relies on).
    ``launch(grid, *args, fp64=..., **kwargs)``: ``grid`` is a function of the meta-parameters.
    """

    def __init__(self, kernel, configs, key, fixed=None):
        self.kernel = kernel
        self.fixed = dict(fixed or {})
        self.default = dict(configs[0].kwargs, num_warps=configs[0].num_warps, num_stages=configs[0].num_stages)
        self.tuned = triton.autotune(configs=configs, key=key)(kernel) if AUTOTUNE and not INTERPRET else None

    def launch(self, grid, *args, fp64=False, **kwargs):
        if INTERPRET:
            meta = dict(INTERPRET_CONFIG, **self.fixed)
            return self.kernel[grid](*args, **kwargs, **meta)
        if fp64:
            meta = dict(FP64_CONFIG, **self.fixed)
            return self.kernel[grid](*args, **kwargs, **meta)
        if self.tuned is None:
            return self.kernel[grid](*args, **kwargs, **self.default, **self.fixed)
        return self.tuned[grid](*args, **kwargs, **self.fixed)
