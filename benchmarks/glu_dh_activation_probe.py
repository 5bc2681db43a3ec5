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
library's (cuBLAS's h, then the kept-h path: ``_h_on_cublas``), the Triton kernel recomputing
both products beside g on its tile (what the library ran before), and cuBLAS's h (one product
with the weights packed beforehand), g and the stream. ``--step`` with it: the recompute mode's
whole training step in plain calls (host time included), the library against the old kernel,
and each one's host time per call at 256 tokens.
"""

import argparse

import torch

import fusedmlp
import fusedmlp.ops.glu as glu
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import host_us_per_call, interleaved_us_row, write_record
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


def recompute_on_tile(gy, x, w_up, w_gate, w_down, act):
    def call():  # the Triton kernel forming g and both products on one tile (three accumulators)
        saved = glu._h_on_cublas
        glu._h_on_cublas = lambda x, wd: glu.gemms_on_cublas(x)
        try:
            return glu.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, None, act, wd=w_down, store_z=True)
        finally:
            glu._h_on_cublas = saved
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", nargs="+", default=["16384x512x1792"], help="tokens x d x hidden, one or more")
    parser.add_argument("--acts", default="silu,gelu,gelu_tanh")
    parser.add_argument("--recompute", action="store_true", help="also time the recompute mode's dh")
    parser.add_argument("--step", action="store_true",
                        help="with --recompute: also the recompute mode's whole training step, plain calls")
    args = parser.parse_args()
    rows = []
    for shape in args.shape:
        rows += probe_shape(shape, args.acts.split(","), args.rounds, args.recompute)
        if args.recompute and args.step:
            rows += [recompute_step_row(shape, act, args.rounds) for act in args.acts.split(",")]
    write_record("glu_dh_activation_probe", rows=rows)


def recompute_steps(m, d, hidden, act):
    """{name: plain call of ``swiglu(..., recompute=True)``'s forward and backward}: the
    library's dh, and the Triton kernel forming g and both products."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    x, w_gate, w_up, w_down = (
        (torch.randn(*size, device="cuda", dtype=torch.bfloat16, generator=gen) / size[1]**0.5).requires_grad_()
        for size in ((m, d), (hidden, d), (hidden, d), (d, hidden)))
    gy = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    leaves = (x, w_gate, w_up, w_down)

    def step():
        return torch.autograd.grad(fusedmlp.swiglu(*leaves, recompute=True, activation=act), leaves, gy)

    def old_step():
        saved = glu._h_on_cublas
        glu._h_on_cublas = lambda x, wd: glu.gemms_on_cublas(x)
        try:
            return step()
        finally:
            glu._h_on_cublas = saved
    return {"step: the library": step, "step: g and h on the tile": old_step}


def recompute_step_row(shape, act, rounds):
    """The steps of ``recompute_steps`` timed (host time included), and their host time per
    call at 256 tokens (GPU work shorter than the host's), each measured three times in turn."""
    m, d, hidden = (int(v) for v in shape.split("x"))
    row = interleaved_us_row(recompute_steps(m, d, hidden, act), rounds, shape=shape, act=act)
    small = recompute_steps(256, d, hidden, act)
    host = {name: [] for name in small}
    for _ in range(3):
        for name, step in small.items():
            host[name].append(round(host_us_per_call(step, calls=50), 1))
    print("    host us per call at 256 tokens:", host, flush=True)
    row["host_us_256_tokens"] = host
    return row


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
            calls["recompute: g and h on the tile"] = recompute_on_tile(gy, x, w_up, w_gate, w_down, act)
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
