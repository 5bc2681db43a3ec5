"""The ping-pong forwards with the bias loaded after the main loop, against the library's (before it).

    PYTHONPATH=src python3 benchmarks/epilogue_bias_after_probe.py [--rounds 3] [--linear MxKxN,...] [--glu DxN,...]
                                                                  [--acts gelu_tanh,identity] [--forms alternating,...]

`benchmarks/epilogue_arrive_sass.py` finds ptxas placing 160-180 of gelu_tanh's epilogue
instructions between a consumer's last MMA wait and its release of the ring's last stage
(about 25 for the identity), so the loader refills that stage late and the other consumer's
main loop, three K steps later, can wait for it: at K = 512 a tile has only 8 K steps. With the
bias loaded from global memory after the main loop instead of before it, the epilogue's
arithmetic depends on a load that ptxas keeps after the barrier before the release: 1-3
instructions remain there (Triton 3.9, sm_90a; the script above). The load's latency then
falls in the epilogue, which runs beside the other consumer's main loop.

Here `pingpong_consumer` with that one change (`consumer_bias_after`, otherwise pingpong.py's
code) drives copies of linear_act's and the GLU's ping-pong forwards (``--forms``: alternating,
cooperative, wide, with the library's configs for each; bias, y alone), set against the
library's kernels in the same forms and the bare cuBLAS GEMM, for ``--acts``; outputs are
checked equal to the library's to the bit. CUDA-graph replays, do_bench with the L2 flushed, interleaved
rounds, medians, us.
"""

import argparse

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.glu import glu_fwd_pingpong_kernel
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.pingpong import (
    accumulator_layout,
    pingpong_loader,
    pingpong_mainloop,
    pingpong_setup,
    program_tiles,
    split_column_halves,
    tile_bias,
    tile_start,
    tma_store_tile,
)
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.ops.glu import GLU_FORWARD_PINGPONG_FORMS
from fusedmlp.ops.linear_act import LINEAR_FORWARD_PINGPONG_FORMS


@gluon.jit
def consumer_bias_after(
    b_ptr, b2_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, PAIRED: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
):
    """pingpong_consumer (y alone) with the biases loaded after the main loop."""
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    ROWS: gl.constexpr = y_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(0 if COOPERATIVE else CONSUMER, program_tiles(M, N, TILE_M, BLOCK_N), 1 if COOPERATIVE else 2):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        if COOPERATIVE:
            row_start += CONSUMER * ROWS
        if PAIRED:
            acc, acc2 = split_column_halves(
                pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, False,
                                  accumulator_layout(2 * BLOCK_N), COOPERATIVE),
                acc_layout)
        else:
            acc = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, False,
                                    acc_layout, COOPERATIVE)
        if HAS_BIAS:  # the one change: loaded here, after the stage's release
            acc = acc + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
            if PAIRED:
                acc2 = acc2 + tile_bias(b2_ptr, col_start, N, BLOCK_N, acc_layout)
        if PAIRED:
            y = acc * activation(acc2, ACT)
        else:
            y = activation(acc, ACT)
        tma_store_tile(y_desc, c_buf, y, row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def linear_fwd_bias_after_kernel(x_desc, w_desc, b_ptr, y_desc, M, N, K, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                                 GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
                                 CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, COOPERATIVE)
    gl.warp_specialize([
        (consumer_bias_after, (b_ptr, b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K, 0, ACT,
                               HAS_BIAS, False, GROUP_M, STAGES, COOPERATIVE)),
        (consumer_bias_after, (b_ptr, b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K, 1, ACT,
                               HAS_BIAS, False, GROUP_M, STAGES, COOPERATIVE)),
        (pingpong_loader, (x_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, False, x_desc, w_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def glu_fwd_bias_after_kernel(x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, y_desc, M, OUT, K, ACT: gl.constexpr,
                              HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                              COOPERATIVE: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w1_desc, y_desc, STAGES, True, 1, COOPERATIVE)
    gl.warp_specialize([
        (consumer_bias_after, (b1_ptr, b2_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, OUT, K, 0,
                               ACT, HAS_BIAS, True, GROUP_M, STAGES, COOPERATIVE)),
        (consumer_bias_after, (b1_ptr, b2_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, OUT, K, 1,
                               ACT, HAS_BIAS, True, GROUP_M, STAGES, COOPERATIVE)),
        (pingpong_loader, (x_desc, w1_desc, w2_desc, a_bufs, b_bufs, ready, empty, M, OUT, K, GROUP_M, STAGES,
                           True, False, x_desc, w1_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def linear_calls(m, k, n, act, forms):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    sms = num_sms(x)
    common = dict(M=m, N=n, K=k, ACT=act, HAS_BIAS=True)
    calls, outputs = {"gemm": lambda: torch.mm(x, w.t())}, {}
    for form in forms:
        config = LINEAR_FORWARD_PINGPONG_FORMS[form]
        y_lib, y_new = (torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        calls[f"library {form}"] = lambda config=config, y=y_lib: launch_pingpong(
            linear_act_fwd_pingpong_kernel, config, m, n, sms, {"x_desc": x}, {"w_desc": w},
            {"y_desc": y, "pre_desc": y}, b_ptr=b, STORE_PRE=False, **common)
        calls[f"bias after {form}"] = lambda config=config, y=y_new: launch_pingpong(
            linear_fwd_bias_after_kernel, config, m, n, sms, {"x_desc": x}, {"w_desc": w}, {"y_desc": y},
            b_ptr=b, **common)
        outputs[form] = (y_lib, y_new)
    return calls, outputs


def glu_calls(m, d, act, forms):
    out = 4 * d
    x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * out, d, device="cuda", dtype=torch.bfloat16) / d**0.5
    b = torch.randn(2 * out, device="cuda", dtype=torch.bfloat16)
    sms = num_sms(x)
    halves = {"w1_desc": w[:out], "w2_desc": w[out:]}
    common = dict(b1_ptr=b[:out], b2_ptr=b[out:], M=m, OUT=out, K=d, ACT=act, HAS_BIAS=True)
    calls, outputs = {"gemm": lambda: torch.mm(x, w.t())}, {}
    for form in forms:
        config = GLU_FORWARD_PINGPONG_FORMS[form]
        y_lib, y_new = (torch.empty(m, out, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        calls[f"library {form}"] = lambda config=config, y=y_lib: launch_pingpong(
            glu_fwd_pingpong_kernel, config, m, out, sms, {"x_desc": x}, halves,
            {"y_desc": y, "h1_desc": y, "h2_desc": y}, STORE_H=False, **common)
        calls[f"bias after {form}"] = lambda config=config, y=y_new: launch_pingpong(
            glu_fwd_bias_after_kernel, config, m, out, sms, {"x_desc": x}, halves, {"y_desc": y}, **common)
        outputs[form] = (y_lib, y_new)
    return calls, outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linear", default="16384x512x1792,65536x512x1792,8192x1024x4096,16384x4096x14336")
    parser.add_argument("--glu", default="1024x8192,1024x32768,2048x16384")
    parser.add_argument("--acts", default="gelu_tanh,identity")
    parser.add_argument("--forms", default="alternating")
    args = parser.parse_args()
    forms = args.forms.split(",")
    rows = []
    cases = [("linear", text) for text in args.linear.split(",") if text] + [("glu", t) for t in args.glu.split(",") if t]
    for op, text in cases:
        for act in args.acts.split(","):
            dims = [int(v) for v in text.split("x")]
            calls, outputs = (linear_calls(*dims, act, forms) if op == "linear"
                              else glu_calls(dims[1], dims[0], act, forms))
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            same = {form: torch.equal(*pair) for form, pair in outputs.items()}
            replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
            row = interleaved_us_row(replays, args.rounds, op=op, shape=text, act=act)
            row["same bits"] = same
            row["ratios to the GEMM"] = {name: row[name] / row["gemm"] for name in calls if name != "gemm"}
            print("   same bits:", same, {k: round(v, 3) for k, v in row["ratios to the GEMM"].items()}, flush=True)
            rows.append(row)
    write_record("epilogue_bias_after_probe", rows=rows)


if __name__ == "__main__":
    main()
