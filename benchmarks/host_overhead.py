"""Host time per call of fusedmlp.geglu on tiny tensors, where device work is negligible.

    python benchmarks/host_overhead.py [cpu|cuda]

On CPU without TRITON_INTERPRET the op runs its PyTorch reference, so the difference to the
plain reference is the op's own overhead (validation, autograd wiring, dispatch). On CUDA it
includes the Triton launches. The development-CPU figures in benchmarks/NOTES.md (68 us per
forward through the custom op at commit c30a795, 32 us through the eager autograd.Function)
came from this.
"""

import sys
import time

import torch

import fusedmlp


def per_call_us(fn, calls=2000):
    for _ in range(100):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main(device="cpu"):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    n, d_in, out = 4, 8, 8
    x = torch.randn(n, d_in, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(2 * out, d_in, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(2 * out, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(n, out, device=device, dtype=dtype)
    rows = [
        ("reference fwd", lambda: fusedmlp.geglu_reference(x, w, b)),
        ("fusedmlp fwd", lambda: fusedmlp.geglu(x, w, b)),
        ("reference fwd+bwd", lambda: torch.autograd.grad(fusedmlp.geglu_reference(x, w, b), (x, w, b), g)),
        ("fusedmlp fwd+bwd", lambda: torch.autograd.grad(fusedmlp.geglu(x, w, b), (x, w, b), g)),
    ]
    for name, fn in rows:
        print(f"{name:20s} {per_call_us(fn):8.1f} us per call ({device})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
