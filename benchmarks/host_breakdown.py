"""Host time of small fused steps, with the op layer's pieces timed inside them, against eager.

    PYTHONPATH=src python3 benchmarks/host_breakdown.py TAG

Microseconds of host per call (the median of 7 runs of 100 back-to-back calls; the GPU work of
each call is shorter than its host work, so this is the host's pace) of: DLRM's bottom MLP
13-512-256-64-16 at 2048 rows (fused and eager, forward and fwd+bwd), linear_act gelu_tanh at
16384 x 512 -> 1792 (fused and eager), a no-op autograd.Function's fwd+bwd (and one whose
backward clones its gradient: one allocation and one launch) and five torch.empty calls.
TAG selects the setting: "caller" in it runs the backward on the calling thread
(``torch.autograd.set_multithreading_enabled(False)``), "instr" wraps the op layer's functions
(ops/mlp.py, ops/linear_act.py) in timers and prints each one's inclusive microseconds per call.
Run it under ``taskset -c N`` to pin the process to cores. Writes host_TAG.json to $OUT.
bf16, CUDA only."""
import json
import os
import sys
import time

import torch
import fusedmlp
import fusedmlp.ops.mlp as M
import fusedmlp.ops.linear_act as LA
from fusedmlp.bench.harness import wrap_in_timer

ACC = {}  # label -> nanoseconds spent inside the wrapped callable since the last clear


def timed(owner, name, label=None):
    """``owner.name`` timed into ACC (``wrap_in_timer``)."""
    wrap_in_timer(owner, name, ACC, label)


def per_call(fn, calls=100, runs=7):
    fn(); torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        ACC.clear()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append(((time.perf_counter() - t) / calls * 1e6, {k: v / calls / 1e3 for k, v in ACC.items()}))
        torch.cuda.synchronize()
    samples.sort(key=lambda s: s[0])
    return samples[len(samples) // 2]

def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "default"
    caller = "caller" in tag
    instrument = "instr" in tag
    torch.autograd.set_multithreading_enabled(not caller)
    dt = torch.bfloat16
    res = {}
    sizes = (13, 512, 256, 64, 16)
    x = torch.randn(2048, 13, device="cuda", dtype=dt, requires_grad=True)
    ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(dt).requires_grad_() for i, o in zip(sizes, sizes[1:])]
    bs = [torch.zeros(o, device="cuda", dtype=dt).requires_grad_() for o in sizes[1:]]
    g = torch.randn(2048, 16, device="cuda", dtype=dt)
    xl = torch.randn(16384, 512, device="cuda", dtype=dt, requires_grad=True)
    wl = (torch.randn(1792, 512, device="cuda") / 512**0.5).to(dt).requires_grad_()
    bl = torch.zeros(1792, device="cuda", dtype=dt).requires_grad_()
    gl_ = torch.randn(16384, 1792, device="cuda", dtype=dt)
    def eager_mlp():
        h = x
        for w, b in zip(ws, bs):
            h = torch.relu(torch.nn.functional.linear(h, w, b))
        return h
    class Noop(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)
        @staticmethod
        def backward(ctx, grad):
            return grad
    class NoopPy(torch.autograd.Function):  # backward with some Python + one CUDA alloc + one launch
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)
        @staticmethod
        def backward(ctx, grad):
            return grad.clone()
    if instrument:
        for name in ("check_mlp_inputs", "mlp_forward_impl", "mlp_backward_impl", "_launch_backward", "_split_grads", "launch"):
            timed(M, name)
        timed(M._fwd_launcher, "launch", "fwd launcher")
        timed(M._dgrad_launcher, "launch", "dgrad launcher")
        for name in ("linear_act_forward_impl", "backward_formula", "recompute_dpre", "_launch_fwd"):
            timed(LA, name, "LA." + name)
    rows = {
        "mlp fwd+bwd": lambda: torch.autograd.grad(fusedmlp.mlp(x, ws, bs, "relu", "relu"), [x] + ws + bs, g),
        "mlp fwd": lambda: fusedmlp.mlp(x, ws, bs, "relu", "relu"),
        "eager mlp fwd+bwd": lambda: torch.autograd.grad(eager_mlp(), [x] + ws + bs, g),
        "eager mlp fwd": eager_mlp,
        "noop fwd+bwd": lambda: torch.autograd.grad(Noop.apply(x), [x], x.detach()),
        "noop clone fwd+bwd": lambda: torch.autograd.grad(NoopPy.apply(x), [x], x.detach()),
        "linear_act fwd+bwd": lambda: torch.autograd.grad(fusedmlp.linear_act(xl, wl, bl, "gelu_tanh"), [xl, wl, bl], gl_),
        "linear_act fwd": lambda: fusedmlp.linear_act(xl, wl, bl, "gelu_tanh"),
        "eager linear fwd+bwd": lambda: torch.autograd.grad(torch.nn.functional.gelu(torch.nn.functional.linear(xl, wl, bl), approximate="tanh"), [xl, wl, bl], gl_),
        "torch.empty x5": lambda: [torch.empty((2048, 64), device="cuda") for _ in range(5)],
    }
    print(f"== {tag} (cpu affinity {sorted(os.sched_getaffinity(0))[:4]}..{len(os.sched_getaffinity(0))})")
    for name, fn in rows.items():
        total, parts = per_call(fn)
        res[name] = {"us": total, "parts": parts}
        extra = "  " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])) if parts else ""
        print(f"  {name:24s} {total:8.1f} us{extra}")
    os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"host_{tag}.json"), "w") as f:
        json.dump(res, f, indent=1)

if __name__ == "__main__":
    main()
