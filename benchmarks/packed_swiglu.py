"""The packed gate/up feed-forward (Phi-3's ``Phi3MLP``) fused against its peers, bf16, fwd+bwd.

    python benchmarks/packed_swiglu.py [TOKENS D HIDDEN [ORDER]]   (default 16384 3072 8192: Phi-3 mini)

ORDER: the steps' names, comma-separated, in the order to time them (default the order below).

Steps timed (``triton.testing.do_bench`` median of forward + backward with a fixed output
gradient, gradients into ``.grad`` set to None before each step), in one process:
    packed           fusedmlp.swiglu_packed on the [2*hidden, d] weight (its gradient in that layout)
    separate         fusedmlp.swiglu on two weight tensors of their own (the same products)
    packed_slices    fusedmlp.swiglu on slices of the packed weight (autograd assembles its gradient)
    eager            Phi3MLP's forward: gate_up(x).chunk(2, -1), up * silu(gate), down
    compile          torch.compile of that
Peak MiB: ``torch.cuda.max_memory_allocated`` of one step above the inputs. The last line
printed is the results as JSON.
"""
import json
import sys

import torch
import torch.nn.functional as F
import triton

import fusedmlp


def eager(x, w, wd):
    gate, up = F.linear(x, w).chunk(2, dim=-1)
    return F.linear(up * F.silu(gate), wd)


def packed_steps(tokens, d, hidden, dt=torch.bfloat16):
    """({name: (forward, leaves)} of the steps above, upstream gradient g) on fresh inputs."""
    x = torch.randn(tokens, d, device="cuda", dtype=dt, requires_grad=True)
    w_gate_up = (torch.randn(2 * hidden, d, device="cuda") / d**0.5).to(dt).requires_grad_()
    w_down = (torch.randn(d, hidden, device="cuda") / hidden**0.5).to(dt).requires_grad_()
    w_gate, w_up = (half.detach().clone().requires_grad_() for half in (w_gate_up[:hidden], w_gate_up[hidden:]))
    compiled = torch.compile(eager)
    steps = {
        "packed": (lambda: fusedmlp.swiglu_packed(x, w_gate_up, w_down), (x, w_gate_up, w_down)),
        "separate": (lambda: fusedmlp.swiglu(x, w_gate, w_up, w_down), (x, w_gate, w_up, w_down)),
        "packed_slices": (lambda: fusedmlp.swiglu(x, w_gate_up[:hidden], w_gate_up[hidden:], w_down),
                          (x, w_gate_up, w_down)),
        "eager": (lambda: eager(x, w_gate_up, w_down), (x, w_gate_up, w_down)),
        "compile": (lambda: compiled(x, w_gate_up, w_down), (x, w_gate_up, w_down)),
    }
    return steps, torch.randn(tokens, d, device="cuda", dtype=dt)


def training_step(forward, leaves, g):
    """One step: the leaves' gradients set to None, then forward and backward with g upstream."""
    def step():
        for t in leaves:
            t.grad = None
        forward().backward(g)

    return step


def main():
    tokens, d, hidden = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (16384, 3072, 8192)
    steps, g = packed_steps(tokens, d, hidden)
    order = sys.argv[4].split(",") if len(sys.argv) > 4 else list(steps)
    results = {}
    for name in order:
        forward, leaves = steps[name]
        step = training_step(forward, leaves, g)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(step, warmup=50, rep=400)
        for t in leaves:
            t.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        results[name] = {"ms": ms, "peak_mib": peak}
        print(f"{name:14s} {ms:8.3f} ms  peak {peak:8.0f} MiB", flush=True)
    print(f"{tokens} x {d} -> 2 x {hidden}, bf16, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}")
    peers = [p for p in ("eager", "compile") if p in results]  # an ORDER may leave them out
    for name, r in results.items():
        if peers:
            print(f"{name:14s} " + ", ".join(f"{r['ms'] / results[p]['ms']:6.3f}x {p}'s time" for p in peers))
    print(json.dumps({"shape": [tokens, d, hidden], "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "triton": triton.__version__, "results": results}))


if __name__ == "__main__":
    main()
