"""Host time of the tensor-descriptor (TMA) launches at the small, host-bound shapes.

A TMA kernel takes a tensor descriptor per operand. Three ways to launch it are timed, in
one process, interleaved (rounds of each in turn, so that the host's drift touches all
alike), for each op at its small bench shape (bf16, backward on the calling thread):
    direct    the launch cache expands each descriptor from its table (kernels/launch.py)
    wrapped   the same cached launch through Triton's launcher, which builds and fills every
              descriptor on every call (``launch.DIRECT_DESCRIPTORS = False``)
    pointer   the ops' pointer kernels (no descriptors; a slower main loop on the GPU)
Printed per op and mode: the median over the rounds of host microseconds per call
(back-to-back calls, no sync; the GPU work of a call is shorter, so the host sets the pace)
and do_bench's median of the same call.

    python benchmarks/small_shape_paths.py [--rounds 7] [--json FILE]
"""

import argparse
import contextlib
import json
import statistics

import torch

import fusedmlp
import fusedmlp.kernels.launch as launch_mod
import fusedmlp.ops.glu as glu_ops
import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import host_us_per_call, median_ms

_MODULES = (glu_ops, linear_ops, lora_ops)


@contextlib.contextmanager
def variant(name):
    saved = [m.tma_eligible for m in _MODULES], launch_mod.DIRECT_DESCRIPTORS
    if name == "pointer":
        for m in _MODULES:
            m.tma_eligible = lambda *tensors: False
    launch_mod.DIRECT_DESCRIPTORS = name == "direct"
    try:
        yield
    finally:
        for m, f in zip(_MODULES, saved[0]):
            m.tma_eligible = f
        launch_mod.DIRECT_DESCRIPTORS = saved[1]



def cases(dtype):
    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(dtype).requires_grad_()

    x = leaf(8192, 1024)
    w, b = leaf(1024, 1024, scale=1024**-0.5).detach(), leaf(1024).detach()
    a, lb = leaf(16, 1024, scale=1024**-0.5), leaf(1024, 16, scale=0.25)
    yield "lora 8192x1024 r16", lambda: fusedmlp.lora_linear(x, w, b, a, lb, 2.0), (x, a, lb)
    x2 = leaf(16384, 512)
    w2, b2 = leaf(1792, 512, scale=512**-0.5), leaf(1792)
    yield "linear_act 16384x512->1792 gelu_tanh", lambda: fusedmlp.linear_act(x2, w2, b2, "gelu_tanh"), (x2, w2, b2)
    wg, wu, wd = leaf(1792, 512, scale=512**-0.5), leaf(1792, 512, scale=512**-0.5), leaf(512, 1792, scale=1792**-0.5)
    yield "swiglu 16384x512 hidden 1792", lambda: fusedmlp.swiglu(x2, wg, wu, wd), (x2, wg, wu, wd)
    x3 = leaf(8192, 1024)
    w3, b3 = leaf(8192, 1024, scale=1024**-0.5), leaf(8192)
    yield "geglu 8192x1024->4096 (recompute)", lambda: fusedmlp.geglu(x3, w3, b3), (x3, w3, b3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per variant")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    names = ("direct", "wrapped", "pointer")
    results = []
    for case, forward, leaves in cases(torch.bfloat16):
        g = torch.randn_like(forward())
        steps = {"fwd": forward, "fwd+bwd": lambda: torch.autograd.grad(forward(), leaves, g)}
        for mode, fn in steps.items():
            samples = {name: [] for name in names}
            for _ in range(args.rounds):
                for name in names:
                    with variant(name):
                        samples[name].append(host_us_per_call(fn, runs=1))
            for name in names:
                with variant(name):
                    ms = median_ms(fn)
                host = statistics.median(samples[name])
                results.append({"case": case, "variant": name, "mode": mode, "host_us": host,
                                "host_us_rounds": samples[name], "ms": ms})
                print(f"{case:38s} {mode:8s} {name:8s} host {host:7.1f} us/call "
                      f"(rounds {min(samples[name]):.0f}-{max(samples[name]):.0f})  do_bench {ms * 1e3:7.1f} us",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": args.rounds,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
