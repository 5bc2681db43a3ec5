"""SwiGLU's store-mode dh kernel by activation: the three-consumer kernel (K <= 512), the 128 x 128
two-consumer one and cuBLAS's g plus the stream kernel.

    PYTHONPATH=src python3 benchmarks/glu_dh_activation_probe.py [--rounds 5] [--acts silu,gelu,gelu_tanh]
        [--shape 16384x512x1792 ...]

Why: the linear forward's three-consumer resident kernel (160 registers a consumer) ran gelu
(erf) 1.18x slower than the two-consumer kernel (benchmarks/NOTES.md, "The resident linear
forward by activation"). SwiGLU's dh kernel at K <= 512 (``glu_bwd_dh_rotating_kernel``,
GLU_DH_PINGPONG_MAX_K) is also three consumers of 160 registers, chosen on silu's timings,
and serves any gate activation without a bias; with gelu ptxas gives it 88 bytes of stack
(Triton 3.9, sm_90a), with silu and gelu_tanh none. Timed in CUDA graphs (us, interleaved
rounds, medians): ``glu_backward_dh_impl`` with g = gy @ W_down formed on the tile and z
stored (SwiGLU's store-mode backward at d = 512, hidden 1792), with that kernel and with the
128 x 128 kernel it uses beyond K = 512 (each forced for the call through ``GLU_DH_PINGPONG_MAX_K``
and an empty ``GLU_DH_WIDE_STREAM_ACTIVATIONS``), and cuBLAS's ``gy @ W_down`` alone for scale;
each dh's relative error against float64. Also timed: cuBLAS's g followed by the stream kernel
over g and h (``glu_backward_dh_impl`` given g itself), the route the library takes where the
ping-pong kernels do not run and, beyond K = 512, for a gelu (erf) gate; the three-consumer kernel
only at K <= 512 (its tuned range). ``--recompute``: the recompute mode's dh as well (h not kept), z stored: the
library's (cuBLAS's h, then the kept-h path: ``_h_on_cublas``) and cuBLAS's h (one product with
the weights packed beforehand), g and the stream. (The Triton kernel that recomputed both
products beside g on its tile, and the ``--step`` comparison with it, left with that kernel:
benchmarks/results/swiglu_recompute_dh_H200_2026-11-29/.)
"""

import argparse

import torch

import fusedmlp.ops.glu as glu
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.ops.activations import activation_reference


def dh_call(gy, x, w_up, w_gate, h, w_down, act, narrow):
    def call():  # the kernel asked for, whatever the library's rules
        saved = glu.GLU_DH_PINGPONG_MAX_K, glu.GLU_DH_WIDE_STREAM_ACTIVATIONS
        glu.GLU_DH_PINGPONG_MAX_K = 1 << 30 if narrow else 0
        glu.GLU_DH_WIDE_STREAM_ACTIVATIONS = ()
        try:
            return glu.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, act, wd=w_down, store_z=True)
        finally:
            glu.GLU_DH_PINGPONG_MAX_K, glu.GLU_DH_WIDE_STREAM_ACTIVATIONS = saved
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", nargs="+", default=["16384x512x1792"], help="tokens x d x hidden, one or more")
    parser.add_argument("--acts", default="silu,gelu,gelu_tanh")
    parser.add_argument("--recompute", action="store_true", help="also time the recompute mode's dh")
    args = parser.parse_args()
    rows = []
    for shape in args.shape:
        rows += probe_shape(shape, args.acts.split(","), args.rounds, args.recompute)
    write_record("glu_dh_activation_probe", rows=rows)


def probe_shape(shape, acts, rounds, recompute):
    m, d, hidden = (int(v) for v in shape.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=torch.bfloat16, generator=gen) / d**0.5
                    for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) / hidden**0.5
    gy = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    h = torch.cat([x @ w_up.t(), x @ w_gate.t()], dim=1)  # [x1 | x2], as the forward stores it
    x1, x2 = h.double().chunk(2, dim=1)
    g = gy.double() @ w_down.double()
    rows = []
    for act in acts:
        z2 = x2.clone().requires_grad_(True)
        activation_reference(z2, act).sum().backward()
        reference = torch.cat([g * activation_reference(x2, act), g * x1 * z2.grad], dim=1)
        calls = {"gy @ W_down (cuBLAS)": lambda: gy @ w_down,
                 "128 x 128, two consumers": dh_call(gy, x, w_up, w_gate, h, w_down, act, False),
                 "cuBLAS g + stream": lambda: glu.glu_backward_dh_impl(gy @ w_down, x, w_up, w_gate, None, None, h,
                                                                       act, store_z=True)}
        if d <= glu.GLU_DH_PINGPONG_MAX_K:
            calls["three consumers (K <= 512)"] = dh_call(gy, x, w_up, w_gate, h, w_down, act, True)
        if recompute:
            calls["recompute: the library"] = lambda: glu.glu_backward_dh_impl(
                gy, x, w_up, w_gate, None, None, None, act, wd=w_down, store_z=True)
            w_packed = torch.cat([w_up, w_gate])  # h as one product, as of a packed weight
            calls["recompute: cuBLAS h, g + stream"] = lambda: glu.glu_backward_dh_impl(
                gy @ w_down, x, w_up, w_gate, None, None, x @ w_packed.t(), act, store_z=True)
        checks = {}
        for name in list(calls)[1:]:
            dh = calls[name]()[0]
            checks[name] = ((dh.double() - reference).norm() / reference.norm()).item()
        replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
        row = interleaved_us_row(replays, rounds, shape=shape, act=act)
        row["relerr"] = checks
        print("   ", checks, flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
