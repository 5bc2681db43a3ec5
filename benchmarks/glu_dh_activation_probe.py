"""SwiGLU's store-mode dh kernel at K <= 512 by activation: the three-consumer kernel against the
128 x 128 two-consumer one.

    PYTHONPATH=src python3 benchmarks/glu_dh_activation_probe.py [--rounds 5] [--acts silu,gelu,gelu_tanh]

Why: the linear forward's three-consumer resident kernel (160 registers a consumer) ran gelu
(erf) 1.18x slower than the two-consumer kernel (benchmarks/NOTES.md, "The resident linear
forward by activation"). SwiGLU's dh kernel at K <= 512 (``glu_bwd_dh_rotating_kernel``,
GLU_DH_PINGPONG_MAX_K) is also three consumers of 160 registers, chosen on silu's timings,
and serves any gate activation without a bias; with gelu ptxas gives it 88 bytes of stack
(Triton 3.9, sm_90a), with silu and gelu_tanh none. Timed in CUDA graphs (us, interleaved
rounds, medians): ``glu_backward_dh_impl`` with g = gy @ W_down formed on the tile and z
stored (SwiGLU's store-mode backward at d = 512, hidden 1792), with that kernel and with the
128 x 128 kernel it uses beyond K = 512 (``GLU_DH_PINGPONG_MAX_K`` set to 0 for the call), and
cuBLAS's ``gy @ W_down`` alone for scale; each dh's relative error against float64.
"""

import argparse

import torch

import fusedmlp.ops.glu as glu
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.ops.activations import activation_reference


def dh_call(gy, x, w_up, w_gate, h, w_down, act, narrow):
    def call():
        saved = glu.GLU_DH_PINGPONG_MAX_K
        glu.GLU_DH_PINGPONG_MAX_K = saved if narrow else 0
        try:
            return glu.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, act, wd=w_down, store_z=True)
        finally:
            glu.GLU_DH_PINGPONG_MAX_K = saved
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", default="16384x512x1792", help="tokens x d x hidden")
    parser.add_argument("--acts", default="silu,gelu,gelu_tanh")
    args = parser.parse_args()
    m, d, hidden = (int(v) for v in args.shape.split("x"))
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
    for act in args.acts.split(","):
        z2 = x2.clone().requires_grad_(True)
        activation_reference(z2, act).sum().backward()
        reference = torch.cat([g * activation_reference(x2, act), g * x1 * z2.grad], dim=1)
        calls = {"gy @ W_down (cuBLAS)": lambda: gy @ w_down,
                 "three consumers (K <= 512)": dh_call(gy, x, w_up, w_gate, h, w_down, act, True),
                 "128 x 128, two consumers": dh_call(gy, x, w_up, w_gate, h, w_down, act, False)}
        checks = {}
        for name in list(calls)[1:]:
            dh = calls[name]()[0]
            checks[name] = ((dh.double() - reference).norm() / reference.norm()).item()
        replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
        row = interleaved_us_row(replays, args.rounds, shape=args.shape, act=act)
        row["relerr"] = checks
        print("   ", checks, flush=True)
        rows.append(row)
    write_record("glu_dh_activation_probe", rows=rows)


if __name__ == "__main__":
    main()
