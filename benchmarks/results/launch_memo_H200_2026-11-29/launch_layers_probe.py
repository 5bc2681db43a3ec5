"""Record of the run (2026-11-29, H200, the tree of commit ff547d5, before the memo):
``PYTHONPATH=src python3 launch_layers_probe.py 256x512x1792``; its output is in the README.

Host us per call of one ping-pong launch (the dgrad kernel of SwiGLU's dx) at each layer of
the launch path: launch_pingpong, launch, FastLaunch.call, _DirectLaunch.__call__, the raw C
launcher with its arguments prepared."""
import sys

import torch

import fusedmlp.kernels.launch as kl
import fusedmlp.ops._common as common
import fusedmlp.ops.swiglu as sw
from fusedmlp.bench.harness import host_us_per_call

SEEN = {}


def record(cls, name):
    fn = getattr(cls, name)

    def wrapped(self, *a, **k):
        SEEN[name] = (self, a, k)
        return fn(self, *a, **k)
    setattr(cls, name, wrapped)
    return fn


def main():
    m, d, hidden = (int(v) for v in sys.argv[1].split("x"))
    g = torch.Generator(device="cuda").manual_seed(0)
    d_up, d_gate = (torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    out = torch.empty(m, d, device="cuda", dtype=torch.bfloat16)
    call = lambda: sw._input_grad(d_up, d_gate, w_up, w_gate, out, False)  # noqa: E731
    call()
    torch.cuda.synchronize()
    raw_call = record(kl._DirectLaunch, "__call__")
    fast_call = record(kl.FastLaunch, "call")
    lp = common.launch_pingpong
    lp_args = {}

    def lp_rec(*a, **k):
        lp_args["a"], lp_args["k"] = a, k
        return lp(*a, **k)
    sw.launch_pingpong = lp_rec
    call()
    sw.launch_pingpong = lp
    kl._DirectLaunch.__call__, kl.FastLaunch.call = raw_call, fast_call
    direct, (grid, stream, bound), _ = SEEN["__call__"]
    fast, fargs, fkw = SEEN["call"]
    args = []
    for position, value in enumerate(bound):
        meta = direct.descriptors.get(position)
        args.extend([value] if meta is None else direct._expanded(position, value, meta))
    gx, gy_, gz = grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1
    if direct.sequence:
        raw = lambda: direct.raw(gx, gy_, gz, stream, *direct.head, tuple(args))  # noqa: E731
    else:
        raw = lambda: direct.raw(gx, gy_, gz, stream, *direct.head, *args)  # noqa: E731
    layers = {
        "torch.mm": lambda: torch.mm(d_up, w_up),
        "raw C launcher": raw,
        "_DirectLaunch.__call__": lambda: direct(grid, stream, bound),
        "FastLaunch.call": lambda: fast.call(*fargs, **fkw),
        "launch_pingpong": lambda: lp(*lp_args["a"], **lp_args["k"]),
        "_input_grad": call,
    }
    print(f"{sys.argv[1]}: {len(args)} raw arguments, {len(bound)} bound")
    for _ in range(2):
        print("  ", {name: round(host_us_per_call(fn, calls=200), 1) for name, fn in layers.items()}, flush=True)


if __name__ == "__main__":
    main()
