"""Host time of each piece of a fused MLP step (no synchronisation inside the timed loop).

    python benchmarks/mlp_host_time.py [--batch 2048] [--dtype bf16]

Prints microseconds per call (median of 5 runs of 200 calls) for: the input checks, the
forward kernel launch alone, fusedmlp.mlp forward (no grad / training), the backward alone,
and a full step, each with launches through Triton's own path and through the compiled-launch
cache (kernels/launch.py); then the kernel times of one step from the PyTorch profiler.
"""

import argparse
import contextlib

import torch

import fusedmlp
import fusedmlp.kernels.launch as launch_mod
import fusedmlp.ops.mlp as mlp_ops
from fusedmlp.bench.harness import host_us_per_call


def _no_grad(fn, *args):
    with torch.no_grad():  # as inside autograd's backward
        return fn(*args)



def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    for sizes, last in (((13, 512, 256, 64, 16), "relu"), ((367, 512, 256, 1), "sigmoid")):
        x = torch.randn(args.batch, sizes[0], device="cuda", dtype=dtype, requires_grad=True)
        ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(dtype).requires_grad_() for i, o in zip(sizes, sizes[1:])]
        bs = [torch.zeros(o, device="cuda", dtype=dtype).requires_grad_() for o in sizes[1:]]
        g = torch.randn(args.batch, sizes[-1], device="cuda", dtype=dtype)
        plan = mlp_ops.mlp_plan(tuple(sizes), ("relu",) * (len(sizes) - 2) + (last,), (True,) * (len(sizes) - 1),
                                mlp_ops.FULL_MAX)
        y, saved, padded = mlp_ops._launch_forward(x.detach(), ws, bs, plan, True)
        rows = {
            "checks": lambda: mlp_ops.check_mlp_inputs(x, ws, bs),
            "fwd launch (kernel only)": lambda: mlp_ops._launch_forward(x.detach(), ws, bs, plan, False),
            "fwd launch, saving": lambda: mlp_ops._launch_forward(x.detach(), ws, bs, plan, True),
            "bwd launches (dgrad+wgrad)": lambda: _no_grad(mlp_ops._launch_backward, g, x.detach(), ws, saved, y, plan, True, padded),
        }
        rows["mlp() no grad"] = lambda: fusedmlp.mlp(x, ws, bs, "relu", last)
        rows["mlp() training fwd"] = lambda: fusedmlp.mlp(x, ws, bs, "relu", last)
        rows["mlp() fwd+bwd"] = lambda: torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", last), [x] + ws + bs, g)

        def eager():
            h = x
            for i, (w, b) in enumerate(zip(ws, bs)):
                h = torch.nn.functional.linear(h, w, b)
                h = torch.sigmoid(h) if (i == len(ws) - 1 and last == "sigmoid") else torch.relu(h)
            return h

        class Noop(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t.view_as(t)

            @staticmethod
            def backward(ctx, grad):
                return grad

        rows["eager fwd"] = eager
        rows["eager fwd+bwd"] = lambda: torch.autograd.grad(eager(), [x] + ws + bs, g)
        rows["no-op autograd.Function fwd+bwd"] = lambda: torch.autograd.grad(Noop.apply(x), [x], x.detach())
        rows["5 x torch.empty"] = lambda: [torch.empty((args.batch, 64), device="cuda") for _ in range(5)]
        print(f"\n{'-'.join(map(str, sizes))} batch {args.batch} {args.dtype}: host microseconds per call")
        print(f"  {'':36s} {'triton':>8s} {'cached':>8s}")
        for name, fn in rows.items():
            times = []
            for fast in (False, True):
                launch_mod.FAST_LAUNCH = fast
                with torch.no_grad() if name == "mlp() no grad" else contextlib.nullcontext():
                    times.append(host_us_per_call(fn))
            print(f"  {name:36s} {times[0]:8.1f} {times[1]:8.1f}")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", last), [x] + ws + bs, g)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))


if __name__ == "__main__":
    main()
