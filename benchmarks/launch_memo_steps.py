"""Host time of fused steps with the ping-pong launches' finished calls reused and without.

``launch_pingpong`` (ops/_common.py) files each launch's finished call under a memo key of all
its arguments, and a later call with the same tensors and values launches it again
(kernels/launch.py, ``launch_prepared``). Timed here in one process, the memo on and off
(``launch_prepared`` replaced by one that never finds a call; the key is still built), in
interleaved rounds, every other one in reverse order, so that the host's drift touches both:

    host_us   host microseconds per call at SMALL tokens: back-to-back calls, no sync (the GPU
              work is shorter, so this is the host's pace; ``host_us_per_call``)
    plain_us  do_bench's median of the same call at LARGE tokens (CUDA events, L2 flushed):
              what a plain call costs where the host and the GPU both count

Cases (bf16): SwiGLU 512 -> 1792 (``recompute=False``) forward and training step, the same step
in eager PyTorch for scale (not touched by the memo), GEGLU 1024 -> 2 x 4096 store mode,
linear_act 512 -> 1792 gelu_tanh, LoRA 1024 -> 1024 r 16; steps = forward + ``autograd.grad``.

    PYTHONPATH=src python3 benchmarks/launch_memo_steps.py [--small 256] [--large 16384] [--rounds 6]

Prints the medians; writes them with every round to $OUT/launch_memo_steps.json.
"""

import argparse
import statistics

import torch

import fusedmlp
import fusedmlp.ops._common as common
from fusedmlp.bench.harness import host_us_per_call, median_ms, write_record

MEMO_ON = common.launch_prepared


def cases(m):
    g = torch.Generator(device="cuda").manual_seed(0)

    def t(*size, grad=True, scale=True):
        v = torch.randn(*size, device="cuda", dtype=torch.bfloat16, generator=g)
        v = v / size[-1] ** 0.5 if scale else v
        return v.requires_grad_(grad)

    d, hidden = 512, 1792
    sw = (t(m, d), t(hidden, d), t(hidden, d), t(d, hidden))
    gy_sw = t(m, d, grad=False)
    ge = (t(m, 1024), t(8192, 1024), t(8192, scale=False))
    gy_ge = t(m, 4096, grad=False)
    la = (t(m, d), t(hidden, d), t(hidden, scale=False))
    gy_la = t(m, hidden, grad=False)
    lo_w = t(1024, 1024, grad=False)
    lo = (t(m, 1024), t(16, 1024), t(1024, 16))
    gy_lo = t(m, 1024, grad=False)
    return {
        "swiglu step": lambda: torch.autograd.grad(fusedmlp.swiglu(*sw), sw, gy_sw),
        "swiglu fwd": lambda: fusedmlp.swiglu(*sw),
        "eager swiglu step": lambda: torch.autograd.grad(
            (torch.nn.functional.silu(sw[0] @ sw[1].t()) * (sw[0] @ sw[2].t())) @ sw[3].t(), sw, gy_sw),
        "geglu store step": lambda: torch.autograd.grad(fusedmlp.geglu(*ge, recompute=False), ge, gy_ge),
        "linear_act step": lambda: torch.autograd.grad(fusedmlp.linear_act(*la, activation="gelu_tanh"), la, gy_la),
        "lora step": lambda: torch.autograd.grad(
            fusedmlp.lora_linear(lo[0], lo_w, None, lo[1], lo[2], 2.0), lo, gy_lo),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=256, help="tokens of the host-time cases")
    parser.add_argument("--large", type=int, default=16384, help="tokens of the plain-call cases")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    small, large = cases(args.small), cases(args.large)
    host = {mode: {name: [] for name in small} for mode in ("on", "off")}
    plain = {mode: {name: [] for name in large} for mode in ("on", "off")}
    try:
        for r in range(args.rounds):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                common.launch_prepared = MEMO_ON if mode == "on" else (lambda kernel, memo: False)
                for name, fn in small.items():
                    host[mode][name].append(host_us_per_call(fn, calls=50))
                for name, fn in large.items():
                    plain[mode][name].append(median_ms(fn) * 1000)
    finally:
        common.launch_prepared = MEMO_ON

    def medians(times):
        return {mode: {name: round(statistics.median(v), 1) for name, v in by_name.items()}
                for mode, by_name in times.items()}

    print("host us per call:", medians(host))
    print("plain us:", medians(plain))
    write_record("launch_memo_steps", host_us=medians(host), plain_us=medians(plain),
                 rounds={"host_us": host, "plain_us": plain})


if __name__ == "__main__":
    main()
