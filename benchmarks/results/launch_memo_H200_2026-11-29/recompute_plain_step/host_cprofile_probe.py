"""Record of the run (2026-11-29, H200, the tree of commit ff547d5): ``PYTHONPATH=src python3
host_cprofile_probe.py 256x512x1792``; its cProfile tables are this folder's cprofile_*.txt.

Host time of fused steps at small shapes: per-call wall time against eager, and cProfile's top functions."""
import cProfile
import io
import os
import pstats
import sys

import torch

import fusedmlp
from fusedmlp.bench.harness import host_us_per_call

OUT = os.environ.get("OUT", ".")


def leaves(m, d, hidden):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x, w_gate, w_up, w_down = (
        (torch.randn(*size, device="cuda", dtype=torch.bfloat16, generator=gen) / size[1]**0.5).requires_grad_()
        for size in ((m, d), (hidden, d), (hidden, d), (d, hidden)))
    gy = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return (x, w_gate, w_up, w_down), gy


def main():
    m, d, hidden = (int(v) for v in sys.argv[1].split("x"))
    ls, gy = leaves(m, d, hidden)
    x, wg, wu, wd = ls
    steps = {
        "fused fwd": lambda: fusedmlp.swiglu(*ls),
        "fused step": lambda: torch.autograd.grad(fusedmlp.swiglu(*ls), ls, gy),
        "fused recompute step": lambda: torch.autograd.grad(fusedmlp.swiglu(*ls, recompute=True), ls, gy),
        "eager fwd": lambda: (torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t(),
        "eager step": lambda: torch.autograd.grad(
            (torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t(), ls, gy),
    }
    for name, step in steps.items():
        print(f"{sys.argv[1]} {name}: host {host_us_per_call(step, calls=50):.1f} us/call", flush=True)
    for name in ("fused step", "fused recompute step"):
        prof = cProfile.Profile()
        step = steps[name]
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(100):
            step()
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(28)
        text = s.getvalue()
        with open(os.path.join(OUT, f"cprofile_{sys.argv[1]}_{name.replace(' ', '_')}.txt"), "w") as f:
            f.write(text)
            s2 = io.StringIO()
            pstats.Stats(prof, stream=s2).sort_stats("cumtime").print_stats(45)
            f.write(s2.getvalue())
        print(name, "\n".join(line[:150] for line in text.splitlines()[:40]), flush=True)


if __name__ == "__main__":
    main()
