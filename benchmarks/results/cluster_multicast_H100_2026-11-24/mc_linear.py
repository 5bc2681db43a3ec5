"""Prototype: the linear (and, with PAIRED, the GLU) forward's ping-pong kernel on 2-CTA
clusters, W tiles multicast. Needs Triton 3.9's Gluon (multi-CTA layouts); `python mc_linear.py
compile [paired]` compiles it for sm_90a without a GPU.

A cluster owns tiles of 2 * BLOCK_M rows; CTA r of the pair takes rows r * BLOCK_M .. of each
(x tile and y tile split by cga_layout [[1, 0]]), and both CTAs receive the same W tile
(cga_layout [[0, 0]]), which the lead CTA loads once and multicasts. Barriers:
- ready[s]: per CTA; each CTA's loader expects its x half + the whole W tile;
- empty[s]: per CTA; its consumers freed the stage (its x half may be overwritten);
- pair_empty[s]: one for the pair (in the lead CTA); both CTAs' loaders arrive once their own
  consumers freed the stage (FORWARD; without it, the consumers arrive themselves), only the
  lead waits, before it multicasts the next W tile into both CTAs.
MULTICAST=False: each CTA loads its own copy of W, no pair barrier.
"""
import sys
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait, fence_async_shared
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.pingpong import program_tiles, tile_start, tile_bias

CGA_ROWS = [[1, 0]]
CGA_BCAST = [[0, 0]]


@gluon.constexpr_function
def cluster_acc_layout(block_n):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, block_n, 16],
                                     cga_layout=[[1, 0]])


@gluon.jit
def mc_loader(x_desc, w_desc, w2_desc, PAIRED: gl.constexpr, a_bufs, b_bufs, ready, empty, pair_empty, M, N, K,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr, FORWARD: gl.constexpr, MULTICAST: gl.constexpr):
    TILE_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    stage_bytes: gl.constexpr = x_desc.nbytes_per_cta + w_desc.nbytes_per_cta * (2 if PAIRED else 1)
    k_tiles = gl.cdiv(K, BLOCK_K)
    count = 0
    for i in range(program_tiles(M, N, TILE_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        for kk in range(k_tiles):
            stage = count % STAGES
            phase = ((count // STAGES) & 1) ^ 1
            mbarrier.wait(empty.index(stage), phase)
            if not MULTICAST:  # each CTA loads its own copy of W: nothing to wait for in the other CTA
                pass
            elif FORWARD:  # this CTA's consumers released the stage: tell the lead, which waits for both
                mbarrier.arrive(pair_empty.index(stage))
                mbarrier.wait(pair_empty.index(stage), phase ^ 1)
            else:
                mbarrier.wait(pair_empty.index(stage), phase)
            bar = ready.index(stage)
            mbarrier.expect(bar, stage_bytes)
            tma.async_load(x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
            if PAIRED:
                tma.async_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage).slice(0, BLOCK_N),
                               multicast=MULTICAST)
                tma.async_load(w2_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage).slice(BLOCK_N, BLOCK_N),
                               multicast=MULTICAST)
            else:
                tma.async_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage), multicast=MULTICAST)
            count += 1


@gluon.jit
def mc_consumer(b_ptr, b2_ptr, PAIRED: gl.constexpr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, pair_empty, turn, M, N, K,
                CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                GROUP_M: gl.constexpr, STAGES: gl.constexpr, FORWARD: gl.constexpr):
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = cluster_acc_layout(BLOCK_N)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, TILE_M, BLOCK_N), 2):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        if HAS_BIAS:
            bias = tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
            if PAIRED:
                bias2 = tile_bias(b2_ptr, col_start, N, BLOCK_N, acc_layout)
        mbarrier.wait(turn.index(CONSUMER), ((i // 2) & 1) ^ (1 - CONSUMER))
        ACC_N: gl.constexpr = 2 * BLOCK_N if PAIRED else BLOCK_N
        acc = gl.zeros((TILE_M, ACC_N), dtype=gl.float32, layout=cluster_acc_layout(ACC_N))
        count = i * k_tiles
        prev_stage = 0
        for kk in range(k_tiles):
            stage = count % STAGES
            mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(stage), b_bufs.index(stage).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index(prev_stage), pred=kk > 0)
            if not FORWARD:
                mbarrier.arrive(pair_empty.index(prev_stage), pred=kk > 0)
            prev_stage = stage
            count += 1
        mbarrier.arrive(turn.index(1 - CONSUMER))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage))
        if not FORWARD:
            mbarrier.arrive(pair_empty.index(prev_stage))
        if PAIRED:
            left, right = acc.reshape([TILE_M, 2, BLOCK_N]).permute((0, 2, 1)).split()
            acc = gl.convert_layout(left, acc_layout, assert_trivial=True)
            acc2 = gl.convert_layout(right, acc_layout, assert_trivial=True)
        if HAS_BIAS:
            acc = acc + bias
            if PAIRED:
                acc2 = acc2 + bias2
        if PAIRED:
            y = acc * activation(acc2, ACT)
        else:
            y = activation(acc, ACT)
        tma.store_wait(0)
        c_buf.store(y.to(y_desc.dtype))
        fence_async_shared()
        tma.async_store(y_desc, [row_start, col_start], c_buf)
    tma.store_wait(0)


@gluon.jit
def mc_linear_fwd_kernel(x_desc, w_desc, w2_desc, b_ptr, b2_ptr, y_desc, M, N, K, PAIRED: gl.constexpr,
                         ACT: gl.constexpr, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, FORWARD: gl.constexpr,
                         MULTICAST: gl.constexpr):
    gl.static_assert(gl.num_ctas() == 2)
    a_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0] * (2 if PAIRED else 1)
    b_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, W_ROWS, w_desc.block_type.shape[1]], w_desc.layout)
    c_bufs = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    turn = mbarrier.allocate_mbarrier(batch=2)
    if MULTICAST:
        pair_empty = mbarrier.allocate_mbarrier(batch=STAGES, two_ctas=True)
    else:  # not used
        pair_empty = empty
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
        if MULTICAST:
            mbarrier.init(pair_empty.index(stage), count=1)
    for c in gl.static_range(2):
        mbarrier.init(turn.index(c), count=1)
    gl.warp_specialize([
        (mc_consumer, (b_ptr, b2_ptr, PAIRED, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, pair_empty, turn, M, N, K, 0, ACT,
                       HAS_BIAS, GROUP_M, STAGES, FORWARD)),
        (mc_consumer, (b_ptr, b2_ptr, PAIRED, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, pair_empty, turn, M, N, K, 1, ACT,
                       HAS_BIAS, GROUP_M, STAGES, FORWARD)),
        (mc_loader, (x_desc, w_desc, w2_desc, PAIRED, a_bufs, b_bufs, ready, empty, pair_empty, M, N, K, GROUP_M, STAGES, FORWARD,
                      MULTICAST)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def descriptors(x, w, y, BM=128, BN=128, BK=64):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    gdt = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16
    def d(t, block, cga):
        return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gdt, cga_layout=cga))
    return d(x, [2 * BM, BK], CGA_ROWS), d(w, [BN, BK], CGA_BCAST), d(y, [2 * BM, BN], CGA_ROWS)


CONFIG = dict(GROUP_M=8, STAGES=4, CONSUMER_REGS=232, LOADER_REGS=40, FORWARD=True, MULTICAST=True)


def run(x, w, b, act="gelu_tanh", y=None, sms=None, clusters=None, BM=128, BN=128, BK=64, paired=False, **over):
    """paired: w is a GLU's packed [2 * N, K] weight, y = x1 * act(x2)."""
    M, K = x.shape
    N = w.shape[0] // 2 if paired else w.shape[0]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device) if y is None else y
    w1, w2 = (w[:N], w[N:]) if paired else (w, w)
    b1, b2 = ((b[:N], b[N:]) if paired else (b, b)) if b is not None else (x, x)
    xd, wd, yd = descriptors(x, w1, y, BM, BN, BK)
    w2d = descriptors(x, w2, y, BM, BN, BK)[1]
    sms = sms or torch.cuda.get_device_properties(x.device).multi_processor_count
    tiles = triton.cdiv(M, 2 * BM) * triton.cdiv(N, BN)
    cfg = dict(CONFIG, **over)
    grid = (min(clusters or sms // 2, tiles),)
    global LAST
    LAST = mc_linear_fwd_kernel[grid](xd, wd, w2d, b1, b2, yd, M, N, K, paired, act, b is not None,
                               num_warps=4, num_ctas=2, maxnreg=168, enable_fp_fusion=True, **cfg)
    return y


if __name__ == "__main__" and sys.argv[1:2] == ["compile"]:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type
    base = torch.empty(512, 512, dtype=torch.bfloat16)
    xd, wd, yd = descriptors(base, base, base)
    kern = mc_linear_fwd_kernel
    paired = sys.argv[2:3] == ["paired"]
    if paired:
        xd, wd, yd = descriptors(base, base, base, 128, 64, 64)
    sig = {"x_desc": mangle_type(xd), "w_desc": mangle_type(wd), "w2_desc": mangle_type(wd), "b_ptr": "*bf16",
           "b2_ptr": "*bf16", "y_desc": mangle_type(yd), "M": "i32", "N": "i32", "K": "i32"}
    consts = dict(PAIRED=paired, ACT="gelu_tanh", HAS_BIAS=True, **dict(CONFIG, **(dict(STAGES=5) if paired else {})))
    for k in consts:
        sig[k] = "constexpr"
    pos = {(kern.arg_names.index(k),): v for k, v in consts.items()}
    c = triton.compile(GluonASTSource(kern, sig, constexprs=pos), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_ctas": 2, "maxnreg": 168})
    ptx = c.asm["ptx"]
    open("/tmp/mc.ptx", "w").write(ptx)
    print("shared", c.metadata.shared, "wgmma", ptx.count("wgmma.mma_async"), "multicast", ptx.count("multicast::cluster"),
          "arrive cluster", ptx.count("mbarrier.arrive.shared::cluster"), "clusterid", ptx.count("clusterid"))
