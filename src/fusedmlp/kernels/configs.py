"""Tile-configuration tables and the launcher that applies them.

On a GPU each kernel is autotuned over a short list of configs, keyed on the problem sizes
(the M key is rounded to a power of two so that a new batch size does not re-tune); the
result is cached by Triton for the process and filed on disk for later processes
(kernels/tuning_cache.py). The Triton interpreter cannot autotune over
several configs, and its cost is per program, not per element, so it runs one fixed config.

BLOCK_M of kernels that write per-row-block partial results is fixed (not tuned): the host
sizes the partial buffer from it before launch.
"""

import contextlib
import hashlib
import os

import torch
import triton
import triton.testing

from .launch import COMPILE_OPTIONS, INTERPRET, FastLaunch, as_descriptors, forced, spoil_recording
from .tuning_cache import file_tuner, restore_tuner

# FUSEDMLP_AUTOTUNE=0 launches the first config of each table instead of tuning (compiles one
# config per specialisation: the GPU test suite uses it to stay fast).
AUTOTUNE = os.environ.get("FUSEDMLP_AUTOTUNE", "1") not in ("", "0")

# Paired (GLU) GEMM tiles, (meta, num_warps, num_stages): two fp32 accumulators of
# BLOCK_M x BLOCK_N each. Shared memory per stage with both weight tiles:
# (BLOCK_M + 2 * BLOCK_N) * BLOCK_K * 2 bytes (bf16), plus the epilogue's output tile.
_GLU_TILES = [
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 8, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, 8, 4),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, 8, 4),
]
# Backward dh kernel: BLOCK_M fixed (the host sizes the db partials from it), the rest tuned.
GLU_BWD_BLOCK_M = 128
_GLU_BWD_TILES = [
    ({"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 8, 3),
    ({"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, 8, 4),
    ({"BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, 8, 4),
]

# The store mode's backward stream (glu_bwd_stream_kernel): BLOCK_M is GLU_BWD_BLOCK_M (the db
# partials' row block), SUB_M rows of it are in registers at a time. One config per case, never
# tuned: the kernel writes over its inputs, and an autotuner's repeated timing runs on the
# caller's tensors would hand back a result computed from already overwritten ones. Measured
# on an H200 (bf16, 2026-11-21, diag sweep of 8-10 configs; the old one-tile kernel took
# 1.35 ms at 65536 x 4096 and 0.383 ms at 8192 x 14336): with bias (GEGLU at 65536 x 4096)
# 8 x 128 on 2 warps, 0.807 ms; without (SwiGLU, z stored too) 16 x 128 on 4 warps, 0.364 ms
# at 8192 x 14336. Keyed (has_bias, in_place): those were timed writing new tensors, and on an
# H100 (bf16, 2026-11-23, 14 configs each way, benchmarks/NOTES.md "The backward streams
# written over their inputs") the same stream writing dh over h ran 1.4-1.7x slower with 8 x 128
# on 2 warps (GEGLU d = 1024, N = 32768: 0.865 against 0.503 ms), while 16 x 128 on 2 warps ran
# alike either way and was the fastest in place at all four GEGLU shapes timed (0.539 there;
# 1.042 against 1.416 at d = 4096, N = 16384; on an H200 13-20% faster in place than the old
# config at six shapes). Without a bias no config slowed down in place.
_GLU_STREAM_TILES = {
    (True, False): [({"SUB_M": 8, "BLOCK_N": 128}, 2, 1)],
    (True, True): [({"SUB_M": 16, "BLOCK_N": 128}, 2, 1)],
    (False, False): [({"SUB_M": 16, "BLOCK_N": 128}, 4, 1)],
    (False, True): [({"SUB_M": 16, "BLOCK_N": 128}, 4, 1)],
}

# Linear + activation GEMM tiles: one fp32 accumulator. 128x256x64 is the tile a persistent
# TMA GEMM was measured at 96-101% of cuBLAS bf16 with on an H100 (DESIGN.md).
_LINEAR_TILES = [
    ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, 8, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 8, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    # two programs per SM (2 x 96 KiB of shared memory): one's epilogue runs beside the
    # other's main loop: 0.082 ms against 0.086 for the best one-program tile at 512 -> 1792 x 16384 (H200)
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "PROGRAMS_PER_SM": 2}, 8, 2),
]
# LoRA forward: the linear tiles plus an R_PAD-wide second accumulator and a [R_PAD, BLOCK_K]
# tile of A per stage. The first config fits shared memory up to R_PAD = 64 (it runs without
# autotuning); 128x256 with 3 stages fits only the small ranks (the tuner drops it otherwise).
_LORA_TILES = [
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 8, 4),
    ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, 8, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, 4, 4),
]
# dgrad (dx = dpre @ W): the output tile is BLOCK_M x BLOCK_K, the loop runs over N in
# BLOCK_N steps. BLOCK_M fixed (the host sizes the db partials from it).
LINEAR_DGRAD_BLOCK_M = 128
_LINEAR_DGRAD_TILES = [  # the first fits shared memory in fp32 too (it runs without autotuning)
    ({"BLOCK_N": 32, "BLOCK_K": 128, "GROUP_M": 8}, 4, 3),
    ({"BLOCK_N": 64, "BLOCK_K": 256, "GROUP_M": 8}, 8, 3),
    ({"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8}, 8, 4),
    ({"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8}, 4, 4),
    ({"BLOCK_N": 32, "BLOCK_K": 128, "GROUP_M": 8}, 8, 4),
]

# The dpre stream (g * act'(pre) and the db partials): BLOCK_M as the dgrad's, walked SUB_M
# rows at a time (as the GLU stream); no dot. Tuned (it writes a new tensor). H200, bf16,
# gelu_tanh with bias, against the one-tile kernel before it: 0.098 -> 0.073 ms at
# 16384 x 1792, 0.654 -> 0.416 at 16384 x 14336; relu at 65536 x 4096 stays at 0.41 (it
# was already at the copy bandwidth).
_LINEAR_DPRE_TILES = [
    ({"SUB_M": 8, "BLOCK_N": 128}, 2, 1),
    ({"SUB_M": 16, "BLOCK_N": 128}, 4, 1),
    ({"SUB_M": 32, "BLOCK_N": 128}, 4, 1),
    ({"SUB_M": 64, "BLOCK_N": 128}, 8, 1),
    ({"SUB_M": 128, "BLOCK_N": 128}, 8, 1),
]
# The dpre stream written over the saved pre-activation: one config, never tuned (see the GLU
# stream). 32 x 128 on 2 warps: on an H100 (bf16, 2026-11-23, in place, 14 configs, then three
# interleaved rounds against the 16 x 128 on 4 warps kept before) 1-4% faster at each shape
# timed: 0.499 against 0.512 ms at 16384 x 14336 (gelu_tanh), 0.0795 against 0.0828 at
# 16384 x 1792, 0.580 against 0.589 at 65536 x 4096 (relu).
_LINEAR_DPRE_IN_PLACE_TILES = [({"SUB_M": 32, "BLOCK_N": 128}, 2, 1)]

# Whole-MLP kernels (kernels/mlp.py): a program carries BLOCK_M rows through every layer, so
# BLOCK_M trades occupancy (small batches want many programs) against weight traffic (each
# program reads every weight from L2). The first runs without autotuning.
#
# BLOCK_M >= 64 with 4 or more warps lowers the chained dots to Hopper's wgmma, and Triton 3.6
# compiles some chains wrong there (H200, 16-bit, 49 stacks of depth 1-5 tried; each config
# launched directly; the local error of every step against float64):
# - dgrad, 64 rows on 4 warps: d or dx 70-140% off on 11 stacks (13-40-24-8, 16-128-31,
#   300-8-200-256, ...), an illegal memory access on one more; 128 rows on 8 warps alike.
# - forward, 64 rows on 8 warps: wrong on 3 stacks (13-64-32-24-8, ...).
# - 64 rows on 4 warps and 128 on 8 right in the forward on every stack; 16 or 32 rows (or 2
#   warps: mma.sync) right everywhere, and the interpreter right everywhere.
# So the forward keeps those two wgmma configs (64 rows on 4 warps is the fastest: DLRM's
# bottom MLP at 65536 rows 73 us, against 117 us for the best mma.sync tile), and the dgrad
# runs mma.sync tiles only (149 us against 125 us there). tests/test_mlp.py runs every config
# on the stacks above (test_every_config_on_gpu).
#
# BLOCK_C is the width of a streamed layer's chunks. The forward's 128 x 128 tile on 8 warps
# (3 stages) is for wide inputs: DLRM's top MLP re-reads its x rows once per chunk, and at
# 65536 rows (x in zero-padded 368-wide rows, as ops/mlp.py hands it over) it runs in 167 us
# against 242 us for 64 x 64 on 4 warps (H200, bf16, CUDA-graph timing,
# `benchmarks/mlp_fwd_sweep.py`). 64 x 256 tiles on 8 warps were as fast in a sweep but are
# among the miscompiled configs above. 16 x 128 on 4 warps is for few rows: DLRM's bottom MLP
# in a training forward at 2048 rows 9.17 us against 9.68 for 16 x 64 (H100, bf16, CUDA-graph
# timing; benchmarks/NOTES.md, "The MLP kernels' tuner timed from CUDA graphs"). There, too,
# the dgrad's 64 x 64 tile on 4 warps ran 6-8% faster than the table's best from 8192 rows on
# the bottom MLP, but it is the miscompiled wgmma dgrad above, so not in its table.
#
# Both tables are tuned with launches replayed from a CUDA graph (ops/mlp.py MLP_TUNER_TIMING,
# graph_timing below). Timed by events after an L2 flush, Triton's default, the forward's picks
# on the H100 machine were 2-26% slower (by graph time) than the best config at 4 of 14 cases
# of DLRM's bottom and top MLPs (2048-65536 rows, training and inference); graph-timed, none.
# The graph times the weights warm in L2, as a training loop's back-to-back steps find them
# at these batches; with the L2 flushed before each launch the top MLP's layers after the
# first (512-256-1) run best on 128 x 128 tiles at 2048-8192 rows (10.6 against 11.5 us), warm
# on 64 x 64 (7.5 against 9.9). DLRM's captured training step, graph-tuned against
# event-tuned: 0.98-0.99x back to back at 2048 and 8192 rows, its inference step 0.96-1.02x
# (1.02-1.05x timed with the L2 flushed before each step).
_MLP_FWD_TILES = [
    ({"BLOCK_M": 64, "BLOCK_C": 64}, 4, 2),
    ({"BLOCK_M": 128, "BLOCK_C": 128}, 8, 3),
    ({"BLOCK_M": 32, "BLOCK_C": 64}, 4, 2),
    ({"BLOCK_M": 16, "BLOCK_C": 64}, 4, 2),
    ({"BLOCK_M": 128, "BLOCK_C": 64}, 8, 2),
    ({"BLOCK_M": 16, "BLOCK_C": 128}, 4, 2),
]
_MLP_DGRAD_TILES = [
    ({"BLOCK_M": 32, "BLOCK_C": 64}, 2, 2),
    ({"BLOCK_M": 32, "BLOCK_C": 64}, 4, 2),
    ({"BLOCK_M": 16, "BLOCK_C": 64}, 2, 2),
    ({"BLOCK_M": 16, "BLOCK_C": 64}, 4, 2),
]

# Block shape of each tensor-descriptor argument, by argument name, as meta-parameter names.
# Names not listed are output-shaped: [BLOCK_M, BLOCK_N] tiles of y, h, g, dh, pre, ...
_DESCRIPTOR_BLOCKS = {
    "x_desc": ("BLOCK_M", "BLOCK_K"),    # the row operand of x @ W.T
    "gy_desc": ("BLOCK_M", "BLOCK_K"),   # the row operand of gy @ Wd (SwiGLU backward)
    "dx_desc": ("BLOCK_M", "BLOCK_K"),   # the output of dpre @ W
    "w_desc": ("BLOCK_N", "BLOCK_K"),    # nn.Linear weights [N, K]
    "lora_a_desc": ("R_PAD", "BLOCK_K"),  # LoRA's A [r, K]: all its (padded) rows in one tile
    "w1_desc": ("BLOCK_N", "BLOCK_K"),
    "w2_desc": ("BLOCK_N", "BLOCK_K"),
    "wd_desc": ("BLOCK_K", "BLOCK_N"),   # a weight read as [K, N] (SwiGLU's down projection)
}


def _set_descriptor_blocks(nargs):
    """Pre-hook: give each tensor descriptor the block shape of the config being run."""
    for name, value in nargs.items():
        if name.endswith("_desc") and hasattr(value, "block_shape"):
            value.block_shape = [nargs[meta] for meta in _DESCRIPTOR_BLOCKS.get(name, ("BLOCK_M", "BLOCK_N"))]


def _configs(tiles, tma=False, flatten=False):
    """Configs of a tile table. The persistent (TMA) kernels also take PROGRAMS_PER_SM (1 unless
    the tile says) and FLATTEN: one software-pipelined loop over tiles x K steps, so the next
    tile's first loads are issued during this tile's epilogue. Measured on an H200 (bf16,
    2026-11-21, every tile of the tables with it off and on): the single-accumulator linear
    forward gains 10-25% at K = 512 (512 -> 1792 x 16384: 0.102 -> 0.086 ms, cuBLAS 0.051) and
    2% at K = 4096; the paired GLU forward loses 12-23% and the GLU backward 24% (two
    accumulators: more live registers), and LoRA's best tile 4%. Tiles with PROGRAMS_PER_SM
    are for the persistent kernels only."""
    if not tma:
        return [triton.Config(dict(meta), num_warps=w, num_stages=st) for meta, w, st in tiles
                if "PROGRAMS_PER_SM" not in meta]
    return [triton.Config(dict({"PROGRAMS_PER_SM": 1}, **meta, FLATTEN=flatten), num_warps=w, num_stages=st,
                          pre_hook=_set_descriptor_blocks) for meta, w, st in tiles]


GLU_GEMM_CONFIGS = _configs(_GLU_TILES)
GLU_TMA_CONFIGS = _configs(_GLU_TILES, tma=True)
GLU_BWD_CONFIGS = _configs(_GLU_BWD_TILES)
GLU_BWD_TMA_CONFIGS = _configs(_GLU_BWD_TILES, tma=True)
GLU_STREAM_CONFIGS = {case: _configs(tiles) for case, tiles in _GLU_STREAM_TILES.items()}
LINEAR_CONFIGS = _configs(_LINEAR_TILES)


def _k_halved(tiles):
    """fp32 data with TF32 products: the same tiles half as deep in K, the same bytes a stage.
    In 4-byte elements the 16-bit tables' first tiles overflow shared memory (the linear's
    128 x 256 x 64 in 3 stages asks 288 KiB, the GLU's paired 128 x 128 x 64 in 3 stages 288,
    LoRA's 128 x 128 x 64 in 4 stages 256 and more), and the first config is what runs untuned
    (FUSEDMLP_AUTOTUNE=0); tuned, only the few tiles that fit would be left to choose from."""
    return [(dict(meta, BLOCK_K=meta["BLOCK_K"] // 2), w, st) for meta, w, st in tiles]


LINEAR_FP32_CONFIGS = _configs(_k_halved(_LINEAR_TILES))
GLU_FP32_CONFIGS = _configs(_k_halved(_GLU_TILES))
GLU_BWD_FP32_CONFIGS = _configs(_k_halved(_GLU_BWD_TILES))
LORA_FP32_CONFIGS = _configs(_k_halved(_LORA_TILES))
LINEAR_TMA_CONFIGS = _configs(_LINEAR_TILES, tma=True, flatten=True)
LORA_CONFIGS = _configs(_LORA_TILES)
LORA_TMA_CONFIGS = _configs(_LORA_TILES, tma=True)
LINEAR_DGRAD_CONFIGS = _configs(_LINEAR_DGRAD_TILES)
LINEAR_DGRAD_TMA_CONFIGS = _configs(_LINEAR_DGRAD_TILES, tma=True)
LINEAR_DPRE_CONFIGS = _configs(_LINEAR_DPRE_TILES)
LINEAR_DPRE_IN_PLACE_CONFIGS = _configs(_LINEAR_DPRE_IN_PLACE_TILES)
MLP_FWD_CONFIGS = _configs(_MLP_FWD_TILES)
MLP_DGRAD_CONFIGS = _configs(_MLP_DGRAD_TILES)
# fp64 on GPU: no tensor cores and 8-byte elements; small tiles keep it out of local memory.
FP64_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "BLOCK_C": 64, "SUB_M": 32, "GROUP_M": 8,
               "num_warps": 4, "num_stages": 2}
# The ping-pong forward (kernels/pingpong.py), one config and never tuned: 128 x 128 tiles per
# consumer warpgroup (a 128 x 128 fp32 accumulator is 128 registers a thread, as much as one
# warpgroup can hold next to its epilogue), a 4-deep ring of 64-wide K steps (128 KiB) and one
# output buffer per consumer (64 KiB). Registers: 168 a thread at launch for the 12 warps
# (4 + 4 + the loader's group), moved to the consumers (232-256) from the loader (40).
# On an H200 it beat 64 x 256 tiles (3 or 4 stages) and 5 stages at 4 of 5 shapes
# (benchmarks/NOTES.md, "The ping-pong forward").
LINEAR_PINGPONG_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8,
                          "COOPERATIVE": False, "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4,
                          "maxnreg": 168}
# The linear forward's cooperative form (pingpong.py's COOPERATIVE, as the GLU forward's below):
# both consumers on one tile of 2 x 128 rows, so each weight tile loaded feeds 256 rows; a stage
# is 48 KiB, so 3 stages beside the two 32 KiB output buffers. On an H200 it lost to the
# alternating form with gelu_tanh at every K and tied with the identity at K = 4096
# (benchmarks/NOTES.md, "The linear and LoRA ping-pong forwards, cooperative"); ops/linear_act.py
# times the forms per shape, the alternating one the rule where nothing is timed.
LINEAR_COOPERATIVE_CONFIG = dict(LINEAR_PINGPONG_CONFIG, STAGES=3, COOPERATIVE=True)
# its wide variant (2 x 64 rows by 256 columns, see GLU_WIDE_COOPERATIVE_CONFIG below): 48 KiB a
# stage, 3 stages beside the two 32 KiB output buffers; GROUP_M 16 beat 8 at 6 of 8 shapes
# (not at 4096 -> 14336 without pre stored, where the TMA kernel beat both).
LINEAR_WIDE_COOPERATIVE_CONFIG = dict(LINEAR_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=256, GROUP_M=16)
# The linear forward with x's rows kept in shared memory (linear_act.py's
# linear_act_fwd_resident_kernel), for K up to LINEAR_RESIDENT_MAX_K: 128 x 128 tiles, x's
# [128, K] block in K / 64 chunks (128 KiB at K = 512), 5 ring stages of W's [128, 64] tiles
# (80 KiB) and one [128, 64] output buffer (EPILOGUE_N: the tile goes out in column halves),
# 224 KiB. Three consumers: 16 warps at launch (128 registers a thread), then 160 for the
# consumers (ptxas spills up to 216-288 bytes a thread, outside the main loop) and 24
# for the loader. At 16384 x 512 -> 1792 with gelu_tanh, in one run (H200): 54.0 us, against
# 58.5 with two consumers (quarter-width buffers, 5 stages), 59.6 with two sharing the buffer
# and 54.7 for the alternating ping-pong kernel (benchmarks/NOTES.md, "The linear forward at
# K = 512: x resident with three consumers").
LINEAR_RESIDENT_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "EPILOGUE_N": 64, "STAGES": 5,
                          "CONSUMER_REGS": 160, "LOADER_REGS": 24, "num_warps": 4, "maxnreg": 128}
LINEAR_RESIDENT_MAX_K = 512  # x's chunks beside the ring and the buffer: 8 x 16 KiB
LINEAR_RESIDENT_CONSUMERS = 3  # every unit of the kernel needs at least a tile per consumer
# The activations the resident form is offered for, and those whose accumulator starts from the
# bias (its BIAS_FIRST). H200, bf16, CUDA graphs, with bias, 6-8 interleaved rounds, medians in us
# at 16384 / 65536 x 512 -> 1792: the bias after the main loop | bias first | the alternating
# ping-pong kernel (benchmarks/NOTES.md, "The resident linear forward by activation"):
#   gelu_tanh     53.7 | 52.5 | 54.4      203.4 | 201.0 | 219.8
#   sigmoid       54.3 | 53.2 | 55.2      203.4 | 204.6 | 220.8  (rounds 201-209 either way)
#   silu          51.9 | 53.0 | 53.7      195.3 | 203.3 | 212.2
#   identity      49.4 | 50.7 | 50.8      189.5 | 191.0 | 202.8
#   relu          49.9 | 50.4 | 53.8      192.3 | 192.4 | 214.6
#   squared_relu  50.6 | 53.0 | 52.8      194.9 | 197.3 | 211.6
#   gelu          94.1 | 88.7 | 79.6      335.6 | 316.9 | 290.9  (erf: the longest epilogue; not offered)
LINEAR_RESIDENT_ACTIVATIONS = ("identity", "relu", "squared_relu", "gelu_tanh", "sigmoid", "silu")
LINEAR_RESIDENT_BIAS_FIRST = ("gelu_tanh", "sigmoid")
# The input gradient dx = a @ W + tail_a @ tail_W (linear_act.py's dgrad_pingpong_kernel, W read
# as [K, N] tiles): the wide cooperative tiles. LoRA (dpre @ W + d_xa @ A), H100, bf16, kernel
# time in CUDA graphs (us; 4096 x 4096 weight, r = 16, 8192 / 32768 rows): without the low-rank
# steps 406 / 1638-1684 against cuBLAS's dpre @ W 406 / 1673; with them 415 / 1687-1711 against
# the merged weight's 454 / 1722 (addmm + cuBLAS) and 430 / 1698 (lora.py's merge kernel +
# cuBLAS); 128 x 128 tiles alternating: 446 / 1759. SwiGLU (d_up @ W_up + d_gate @ W_gate, the
# gate half as the tail; H100, bf16, do_bench, 5 interleaved rounds, ms): 16384 tokens at
# 4096 -> 14336 5.23 against cuBLAS's mm + addmm 5.38, at 512 -> 1792 0.093 against 0.098;
# 65536 at 512 -> 1792 0.370 against 0.397; 8192 at 4096 -> 14336 2.69 against 2.66.
DGRAD_PINGPONG_CONFIG = LINEAR_WIDE_COOPERATIVE_CONFIG
# LoRA's forward with xs formed on chip (lora.py's lora_fwd_onchip_kernel): the linear forward's
# 128 x 128 tiles alternating, each stage also holding A's [R_PAD, 64] tile, two xs and two B
# buffers ([128, R_PAD]) beside the output buffers: 4 stages at R_PAD = 16 (216 KiB). Ranks of
# 17-32 (3 stages) measured slower than the forms they would replace (H100, bf16, 32768 x 1024
# -> 1024, r = 32: 155.7 against 150.2 us; benchmarks/NOTES.md, "LoRA's forward with xs formed
# on chip"): the second MMA reads the x tile from shared memory for a 32-wide product.
LORA_ONCHIP_CONFIG = dict(LINEAR_PINGPONG_CONFIG)
LORA_ONCHIP_STAGES = {16: 4}  # stages by R_PAD
# LoRA's forward with xs handed over through memory (lora.py's lora_fwd_handoff_kernel), for
# inputs wider than ops/lora.py's LORA_PINGPONG_MAX_K: the linear forward's wide cooperative
# tiles (2 x 64 rows by 256 columns, 3 stages of 48 KiB beside the two 32 KiB output buffers);
# an xs item's A tile [R_PAD, 64] rides in the first rows of its stage's weight buffer.
LORA_HANDOFF_CONFIG = LINEAR_WIDE_COOPERATIVE_CONFIG
LORA_HANDOFF_RANK_BLOCKS = (16, 32, 64)
# The backward's dpre with pre recomputed on the tile (save_preact=False with gelu, gelu_tanh or
# silu): one output buffer per consumer, into which g is read and over which dpre is written.
# The forward's 128 x 128 tiles (4 stages of 32 KiB + 2 x 32 KiB), except for K <= 512 (the
# main loop short, the epilogue's traffic the bound) 128 x 64 (6 stages of 24 KiB + 2 x 16 KiB).
# H100, bf16, gelu_tanh with bias, 16384 rows, against the recompute forward + dpre stream it
# replaces: 512 -> 1792 0.106 (64 columns) / 0.123 (128) / 0.144 ms; 1024 -> 4096 0.399 /
# 0.297 / 0.363; 4096 -> 14336 5.64 / 3.06 / 3.29 (benchmarks/NOTES.md, "linear_act's recompute
# dpre on the tile"). At 128 columns act' and the db sums beside the accumulator leave ptxas
# 64-184 bytes of stack with a bias (silu, gelu_tanh, gelu); at 64, none. BLOCK_M is the row
# block of the db partials.
LINEAR_DPRE_RECOMPUTE_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8,
                                "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4, "maxnreg": 168}
LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG = dict(LINEAR_DPRE_RECOMPUTE_CONFIG, BLOCK_N=64, STAGES=6)
LINEAR_DPRE_RECOMPUTE_NARROW_MAX_K = 512
# The GLU forward's consumers run one 128 x 128 MMA per stage over x [128, 64] and the two
# weight tiles [64, 64] side by side (BLOCK_N is per weight; the accumulator's column halves
# are x1 and x2), 5 stages. On an H200 it beat 4 stages and 64 x 128 tiles per weight (one
# 64 x 256 MMA) at every shape (benchmarks/NOTES.md, "The GLU forward as one MMA per stage").
GLU_PINGPONG_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "STAGES": 5, "GROUP_M": 8,
                       "COOPERATIVE": False, "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4, "maxnreg": 168}
# The GLU forward's cooperative form: both consumers on one tile of 2 x 128 rows (each its
# 128 x 128 accumulator), so each stage's weight tiles feed 256 rows and a tile's loads shrink
# from 256 to 192 rows of K per 128 rows of output; the epilogues no longer overlap a main
# loop, which a long K amortises. 4 stages of 48 KiB. On an H200: 1.2% faster than the
# alternating form at K = 2048, 2.1% at 4096 with y alone, slower at K <= 1024 and wherever h
# is stored too (benchmarks/NOTES.md, "The GLU forward, cooperative"); on an H100 faster from
# K = 1024, h stored or not. The form is timed per shape (ops/glu.py); GLU_COOPERATIVE_MIN_K
# is the H200's rule, used where nothing is timed (graph capture, FUSEDMLP_AUTOTUNE=0).
GLU_COOPERATIVE_CONFIG = dict(GLU_PINGPONG_CONFIG, STAGES=4, COOPERATIVE=True)
GLU_COOPERATIVE_MIN_K = 2048
# The cooperative forms' wide variant (GLU and linear forwards, one form more each that ops/glu.py
# and ops/linear_act.py time per shape; the LoRA forward's ping-pong form beyond
# LORA_PINGPONG_MAX_K): a tile of 2 x 64 rows by 256 columns (GLU: 128 per weight), so each
# consumer runs one m64n256 MMA per K step where the 2 x 128-row tile runs two m64n128, which
# read the weight tile from shared memory twice: 17% less shared-memory traffic per
# multiply-add, the same L2 traffic per output. H100, bf16, against cuBLAS
# (benchmarks/wide_cooperative_sweep.py; benchmarks/NOTES.md, "128 x 256 cooperative tiles"):
# GLU 16384 x 4096 -> 2 x 16384 1.001x (best form before 1.028x), SwiGLU's 4096 -> 2 x 14336
# 0.991x (1.007x); linear with GROUP_M 16 32768 x 4096 -> 4096 1.028x (1.049x), 2048 -> 8192
# 1.046x (1.057x), slower at 4096 -> 14336 (1.076x against 1.034x); LoRA at K = 4096, r = 16,
# 1.075-1.097x (the Triton kernel 1.093-1.111x).
GLU_WIDE_COOPERATIVE_CONFIG = dict(GLU_COOPERATIVE_CONFIG, BLOCK_M=64, BLOCK_N=128)
# The backward's dh with g = gy @ Wd on the tile (SwiGLU with h kept), up to a K of
# GLU_DH_PINGPONG_MAX_K (beyond it the 128 x 128 kernel below): 128 x 64 tiles, 5 stages, the
# row-major tile order (GROUP_M 1). With two consumers and three buffers each (x1 and x2 in, dh1,
# dh2 and z out) it beat cuBLAS's g plus the stream by 21% / 6% at d = 512 / 1024 on an H200; 5
# stages beat 4 and 3, GROUP_M 1 beat 8 (benchmarks/NOTES.md, "SwiGLU's dh with g on the tile").
# Three consumers taking turns with two buffers each (glu_bwd_dh_rotating_kernel, z out over dh1's
# buffer) took 0.91-0.96x its time at d = 512 (H200; "The dh kernel at d = 512: what bounds it").
# 16 warps, so at most 128 registers a thread at launch; the consumers then take 160 (ptxas: up to
# 24 bytes of stack) and the loader 24.
GLU_DH_ROTATING_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "STAGES": 5, "GROUP_M": 1,
                          "CONSUMER_REGS": 160, "LOADER_REGS": 24, "num_warps": 4, "maxnreg": 128}
GLU_DH_PINGPONG_MAX_K = 512
# Beyond GLU_DH_PINGPONG_MAX_K: 128 x 128 tiles of g (a third fewer L2 reads per output than
# 128 x 64) with the same three [128, 64] buffers per consumer, the epilogue in two column
# halves (EPILOGUE_N: the block of h, dh and z), 4 stages of 32 KB: 224 KB of shared memory.
# H100, bf16, 16384 tokens, us in CUDA graphs (benchmarks/NOTES.md, "SwiGLU's dh on 128 x 128
# tiles"): d = 512 / 1024 / 2048 / 4096: this 132.5 / 259.9 / 803.8 / 3453.6, the 128 x 64
# kernel 131.5 / 297.7 / 1077.0 / 6088.2, cuBLAS's g plus the stream 179.3 / 333.2 / 925.5 /
# 3649.3; GROUP_M 8 beat 16 and 1 from d = 2048 (1 was 1.3% faster at 1024), and 4, 6 and 12
# there too (all within 2% at 1024; "Two backward probes"); 4 stages beat 3.
GLU_DH_WIDE_PINGPONG_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "EPILOGUE_N": 64, "STAGES": 4,
                               "GROUP_M": 8, "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4,
                               "maxnreg": 168}
# Gate activations whose dh beyond GLU_DH_PINGPONG_MAX_K goes through cuBLAS's g and the stream
# instead: gelu (erf), whose value and derivative make the longest epilogue (why the 128 x 128 kernel
# loses this much with it was not profiled; at K <= 512 the three-consumer kernel ties the stream).
# H200, bf16, 16384 tokens, us in CUDA graphs, this kernel / cuBLAS's g plus the stream: gelu at
# d = 1024 / 2048 / 4096 525.3 / 290.1, 1189.8 / 880.9, 4001.2 / 3606.5; silu 245.7 / 290.4, 769.0 /
# 871.6, 3451.7 / 3555.5; gelu_tanh 257.0 / 287.1 at 1024 (benchmarks/NOTES.md, "SwiGLU's store-mode
# dh kernel by activation: gelu").
GLU_DH_WIDE_STREAM_ACTIVATIONS = ("gelu",)
# The recompute mode's dh (h recomputed by the GLU forward's main loop, g read, dh1 and dh2
# written over g's buffer and a second one per consumer): the forward's 128 x 64 tiles per
# weight, 4 stages, GROUP_M 16. On an H200 (GEGLU bf16 with bias) 4 stages beat 5 by up to 5%,
# GROUP_M 16 beat 8 by 1-3% and 4 by up to 6%, and 240 registers per consumer did not help
# (benchmarks/NOTES.md, "GEGLU's recompute dh as a ping-pong kernel"). BLOCK_M is
# GLU_BWD_BLOCK_M, the db partials' row block.
GLU_DH_RECOMPUTE_PINGPONG_CONFIG = {"BLOCK_M": GLU_BWD_BLOCK_M, "BLOCK_N": 64, "BLOCK_K": 64, "STAGES": 4,
                                    "GROUP_M": 16, "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4,
                                    "maxnreg": 168}


# The interpreter's cost is per program: larger tiles, one config (the persistent kernels run
# there when tests force them).
INTERPRET_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "BLOCK_C": 32, "SUB_M": 32, "GROUP_M": 4,
                    "FLATTEN": False, "PROGRAMS_PER_SM": 1}


# Graph timing (Launcher's ``timing="graph"``): each config's launches replayed back to back
# from one CUDA graph, for about GRAPH_TIMING_MS per replay, GRAPH_TIMING_REPLAYS replays.
GRAPH_TIMING_MS = 10.0
GRAPH_TIMING_REPLAYS = 10
_GRAPH_TIMING_MAX_LAUNCHES = 1000


def _refuse_capture():
    """A clear error where a config would be timed while the current stream is being captured."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "fusedmlp tunes a kernel on its first call with each shape, and this first call came "
            "during a CUDA graph capture, where nothing can be timed: run the step once before "
            "capturing it (the usual warm-up), or set FUSEDMLP_AUTOTUNE=0"
        )


def event_timing(kernel_call, quantiles):
    """Triton's default timing (``triton.testing.do_bench``: each launch alone, CUDA events,
    the L2 flushed before it), with ``_refuse_capture``'s error first: inside a capture
    do_bench's device synchronize would fail in CUDA and break the capture."""
    _refuse_capture()
    return triton.testing.do_bench(kernel_call, quantiles=quantiles)


def graph_timing(kernel_call, quantiles):
    """Milliseconds of one ``kernel_call`` at ``quantiles`` (the autotuner's ``do_bench``),
    timed as launches replayed from a CUDA graph: no host time between them and no L2 flush, as
    the kernel runs inside a captured step whose small weights stay in L2. Triton's default
    times each launch alone with CUDA events after flushing the L2, which for kernels of a few
    microseconds picked configs up to 26% slower than the best (the MLP tables' comment above).
    Captured on a stream of its own that waits for the caller's (the inputs may still be in
    flight) and thread-locally (another thread's CUDA calls, a data loader's pinned copies, do
    not break the capture); the caller's stream then waits for it. Nothing can be timed while
    the caller's stream is being captured: ``_refuse_capture``'s error then, before any CUDA
    call that would invalidate that capture."""
    _refuse_capture()
    caller = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(caller)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        kernel_call()  # compiles and loads the config outside the capture
        start.record()
        for _ in range(5):
            kernel_call()
        stop.record()
        stop.synchronize()
        estimate = max(start.elapsed_time(stop) / 5, 1e-3)
        launches = max(1, min(_GRAPH_TIMING_MAX_LAUNCHES, int(GRAPH_TIMING_MS / estimate)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            for _ in range(launches):
                kernel_call()
        times = []
        for _ in range(GRAPH_TIMING_REPLAYS):
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / launches)
    caller.wait_stream(side)
    times.sort()
    at = [times[min(len(times) - 1, int(q * len(times)))] for q in (quantiles or (0.5,))]
    return at if quantiles else at[0]


def _meta_of(config) -> dict:
    """A config's meta-parameters with its num_warps and num_stages."""
    return dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def _table_hash(configs) -> str:
    """A short digest of a config table (its configs' meta-parameters, in order)."""
    return hashlib.sha256(repr([sorted(_meta_of(c).items()) for c in configs]).encode()).hexdigest()[:10]


class Launcher:
    """Launch ``kernel`` with autotuned configs on a GPU and a fixed config elsewhere.

    ``fixed`` holds meta-parameters every config shares (e.g. a BLOCK_M the host relies on).
    ``launch(grid, *args, dtype=..., **kwargs)``: ``grid`` is a function of the meta-parameters;
    ``dtype`` (the data's) picks the table: ``fp32_configs`` for fp32 where given (GEMM tiles
    half as deep in K: ``_k_halved``), ``FP64_CONFIG`` for fp64, ``configs`` otherwise.
    A table of one config is never tuned (the kernels that write over their inputs rely on it).
    Configs may carry a pre-hook (descriptor block shapes); on the fixed-config paths it is
    called here with the keyword arguments and the config, so descriptors must be keywords:
    plain tensors passed to the kernel's ``*_desc`` parameters, wrapped here for Triton's path
    (kernels/launch.py: cached launches expand them without descriptor objects).
    After the first launch of a kind, later ones reuse the compiled kernel directly
    (kernels/launch.py: the same kernel and config, a fraction of the host time).
    ``timing``: how the tuner times a config, "events" (``event_timing``, Triton's default:
    each launch alone after an L2 flush) or "graph" (``graph_timing``: for kernels of a few
    microseconds). Either refuses to time during a CUDA graph capture, with a clear error.
    Each tuned choice is filed in the tuning cache (kernels/tuning_cache.py); a later process
    launches it untimed.
    """

    def __init__(self, kernel, configs, key, fixed=None, fp32_configs=None, timing="events"):
        self.kernel = kernel
        self.configs = list(configs)
        self.fp32_configs = list(fp32_configs or ())
        self._forced = None
        self.params = set(kernel.arg_names)
        self.fixed = dict(fixed or {})
        self.key = tuple(key)
        if timing not in ("events", "graph"):
            raise ValueError(f"timing must be 'events' or 'graph', got {timing!r}")
        self.timing = timing
        first = configs[0]
        self.default = _meta_of(first)
        self.pre_hook = first.pre_hook
        self.tuned = self._tuner(configs, key)
        self.fp32_default = _meta_of(self.fp32_configs[0]) if self.fp32_configs else self.default
        self.tuned_fp32 = self._tuner(self.fp32_configs, key) if self.fp32_configs else self.tuned
        self.fast = FastLaunch(kernel, self.pre_hook, self.pre_hook is _set_descriptor_blocks)
        # the tuning cache's section of each table (kernels/tuning_cache.py): the kernel, the
        # timing and the table itself, whose config indices the entries hold
        name = getattr(kernel, "__name__", None) or kernel.fn.__name__
        tables = [(self.tuned, self.configs)] + ([(self.tuned_fp32, self.fp32_configs)] if self.fp32_configs else [])
        self._sections = {id(tuner): f"{name}:{timing}:{_table_hash(table)}" for tuner, table in tables
                          if tuner is not None}
        self._restored = set()  # (tuner id, device) pairs whose cached choices are loaded

    def _tuner(self, configs, key):
        tune = AUTOTUNE and not INTERPRET and len(configs) > 1  # a single config runs as it is
        if not tune:
            return None
        do_bench = graph_timing if self.timing == "graph" else event_timing
        return triton.autotune(configs=configs, key=key, do_bench=do_bench)(self.kernel)

    def _run_fixed(self, grid, args, kwargs, meta):
        # the shared fixed configs name every block size; a kernel takes the ones it has
        meta = {k: v for k, v in dict(meta, **self.fixed).items() if k in self.params or k.startswith("num_")}
        kwargs = as_descriptors(kwargs)
        if self.pre_hook is not None:
            self.pre_hook(dict(kwargs, **meta))
        return self.kernel[grid](*args, **kwargs, **meta, **COMPILE_OPTIONS), meta

    def _run_tuned(self, tuned, grid, args, kwargs):
        # choices of earlier processes first (a key found there is not timed again), and this
        # launch's choice, if it made one, filed for later ones
        device, section = torch.cuda.current_device(), self._sections[id(tuned)]
        if (id(tuned), device) not in self._restored:
            restore_tuner(tuned, section, device)
            self._restored.add((id(tuned), device))
        known = set(tuned.cache)
        compiled = tuned[grid](*args, **as_descriptors(kwargs), **self.fixed, **COMPILE_OPTIONS)
        if len(tuned.cache) > len(known):
            file_tuner(tuned, section, device, known)
        return compiled, dict(tuned.best_config.all_kwargs(), **self.fixed)

    @contextlib.contextmanager
    def forcing(self, config):
        """Inside the block, GPU launches but fp64 ones run ``config`` (one of ``self.configs``
        or ``self.fp32_configs``), untuned and uncached: the GPU tests check every config this
        way, not only the one the tuner picks."""
        self._forced = _meta_of(config)
        try:
            with forced():
                yield
        finally:
            self._forced = None

    def launch_prepared(self, memo) -> bool:
        """Launch the finished call filed under ``memo`` by an earlier ``launch(..., memo=memo)``
        (kernels/launch.py), if there is one and no config is being forced; returns whether
        it did. ``memo`` holds everything the launch's arguments are built from (``exact_key``),
        so a caller asks before building them."""
        return not INTERPRET and self._forced is None and self.fast.launch_prepared(memo)

    def launch(self, grid, *args, dtype=None, memo=None, **kwargs):
        """Launch (class docstring); returns the compiled kernel. ``memo``: the key under
        which ``launch_prepared`` finds this launch again."""
        if INTERPRET:
            spoil_recording()
            return self._run_fixed(grid, args, kwargs, INTERPRET_CONFIG)[0]
        fp64 = dtype == torch.float64
        if self._forced is not None and not fp64:
            spoil_recording()
            return self._run_fixed(grid, args, kwargs, self._forced)[0]
        tuned, default = ((self.tuned_fp32, self.fp32_default) if dtype == torch.float32
                          else (self.tuned, self.default))
        if fp64:
            run = lambda: self._run_fixed(grid, args, kwargs, FP64_CONFIG)  # noqa: E731
        elif tuned is None:
            run = lambda: self._run_fixed(grid, args, kwargs, default)  # noqa: E731
        else:
            run = lambda: self._run_tuned(tuned, grid, args, kwargs)  # noqa: E731
        return self.fast.call(run, grid, args, kwargs, by_value=self.key, memo=memo)[0]
