"""Tensor-descriptor (TMA) kernels or pointer kernels at the small, host-bound shapes.

A TMA launch builds a tensor descriptor per operand on the host (a Python object, then a
CUtensorMap filled by Triton's launcher), where a pointer kernel takes plain pointers and
strides. Where a step waits for the host, that difference may outweigh the TMA kernel's
faster main loop. For each op at its small bench shape (bf16, backward on the calling
thread): host microseconds per call (back-to-back calls, no sync) and do_bench's median, for
the forward and the forward+backward, with the ops' TMA kernels allowed and with the pointer
kernels forced.

    python benchmarks/small_shape_paths.py [--json FILE]
"""

import argparse
import contextlib
import json
import statistics
import time

import torch

import fusedmlp
import fusedmlp.ops.glu as glu_ops
import fusedmlp.ops.linear_act as linear_ops
import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.harness import median_ms

_MODULES = (glu_ops, linear_ops, lora_ops)


@contextlib.contextmanager
def pointer_kernels():
    saved = [m.tma_eligible for m in _MODULES]
    for m in _MODULES:
        m.tma_eligible = lambda *tensors: False
    try:
        yield
    finally:
        for m, f in zip(_MODULES, saved):
            m.tma_eligible = f


def host_us_per_call(fn, calls=200, runs=5):
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


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
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    results = []
    for name, forward, leaves in cases(torch.bfloat16):
        g = torch.randn_like(forward())
        steps = {"fwd": forward, "fwd+bwd": lambda: torch.autograd.grad(forward(), leaves, g)}
        for path in ("tma", "pointer"):
            with pointer_kernels() if path == "pointer" else contextlib.nullcontext():
                for mode, fn in steps.items():
                    host, ms = host_us_per_call(fn), median_ms(fn)
                    results.append({"case": name, "path": path, "mode": mode, "host_us": host, "ms": ms})
                    print(f"{name:38s} {path:8s} {mode:8s} host {host:7.1f} us/call  do_bench {ms * 1e3:7.1f} us",
                          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
