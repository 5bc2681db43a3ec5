"""Host time of the fused MLP's Python, on a CPU: what our layers cost per call apart from
Triton's launcher and the GPU driver.

    python benchmarks/mlp_host_cpu.py [--batch 2048] [--calls 2000]

Runs ``fusedmlp.mlp`` on CPU tensors (bf16, DLRM's bottom MLP 13-512-256-64-16, ReLU) with
the op's GPU path taken (``use_triton`` answers yes, the device facts are an H100's) and every
kernel launch replaced by a call that does nothing, so what is timed is the op's own work per
call: validation, planning, allocations, autograd wiring, launch arguments. Prints
microseconds per call (best of 5 runs of ``--calls`` calls) for the training forward, the
forward under no_grad, the backward alone (a retained graph), a forward+backward step
(``torch.autograd.grad``, as the bench's step) and, for scale, an autograd.Function that does
nothing with the same inputs, and the forward's launch served by the compiled-launch cache
(kernels/launch.py) with Triton's C launcher replaced by a no-op.
On a GPU host the same Python runs beside real allocations and launches; benchmarks/
mlp_host_time.py times those there.
"""

import argparse
import time

import torch

import fusedmlp.ops.mlp as mlp_ops
from fusedmlp.kernels.launch import FastLaunch


def per_call_us(fn, calls: int) -> float:
    for _ in range(max(100, calls // 10)):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


class _Nothing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *params):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return (g,) + (None,) * (len(ctx.needs_input_grad) - 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()

    mlp_ops.use_triton = lambda t: True
    mlp_ops.num_sms = lambda t: 132
    mlp_ops.shared_memory_per_block = lambda t: 227 * 1024
    forward_launches = []

    def record_forward_launch(grid, *launch_args, **launch_kwargs):  # the first one's, for the cached launch below
        if not forward_launches:
            forward_launches.append((grid, launch_args, launch_kwargs))

    mlp_ops._fwd_launcher.launch = record_forward_launch
    mlp_ops._dgrad_launcher.launch = lambda *a, **k: None
    mlp_ops.launch = lambda *a, **k: None

    sizes = (13, 512, 256, 64, 16)
    dtype = torch.bfloat16
    x = torch.randn(args.batch, sizes[0], dtype=dtype, requires_grad=True)
    weights = [torch.randn(o, i, dtype=dtype, requires_grad=True) for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [torch.randn(o, dtype=dtype, requires_grad=True) for o in sizes[1:]]
    g = torch.randn(args.batch, sizes[-1], dtype=dtype)
    wrt = [x, *weights, *biases]

    def forward():
        return mlp_ops.mlp(x, weights, biases, "relu", "relu")

    def no_grad_forward():
        with torch.no_grad():
            return forward()

    y = forward()
    rows = {
        "training forward": forward,
        "forward, no_grad": no_grad_forward,
        "backward alone": lambda: torch.autograd.grad(y, wrt, g, retain_graph=True),
        "forward+backward": lambda: torch.autograd.grad(forward(), wrt, g),
        "autograd.Function doing nothing, fwd+bwd": lambda: torch.autograd.grad(
            _Nothing.apply(x, *weights, *biases), [x], g[:, :1].expand(-1, sizes[0])),
    }
    # the forward's launch served by the compiled-launch cache, Triton's C launcher a no-op
    import fusedmlp.kernels.launch as launch_mod

    class _Compiled:
        function, packed_metadata = 0, ()

        @staticmethod
        def run(*args):
            pass

    launch_mod.FAST_LAUNCH = True
    launch_mod.bind_cuda_context = lambda: None  # a GPU host binds its CUDA context here, once per thread
    torch.cuda.current_device = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    fast = FastLaunch(mlp_ops.mlp_fwd_kernel)
    grid, launch_args, launch_kwargs = forward_launches[0]
    fast.call(lambda: (_Compiled(), dict(mlp_ops._fwd_launcher.default)), grid, launch_args, launch_kwargs,
              by_value=mlp_ops._fwd_launcher.key)  # the miss files the entry
    rows["forward launch, served by the launch cache"] = lambda: fast.call(
        None, grid, launch_args, launch_kwargs, by_value=mlp_ops._fwd_launcher.key)
    print(f"fused MLP {'-'.join(map(str, sizes))}, batch {args.batch}, {dtype}: host microseconds per call (CPU)")
    for name, fn in rows.items():
        print(f"  {name:42} {per_call_us(fn, args.calls):7.1f}")


if __name__ == "__main__":
    main()
