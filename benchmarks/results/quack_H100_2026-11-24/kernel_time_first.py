"""GPU kernel time per step (sum of kernel durations from torch.profiler), host excluded."""
import json, os, sys, torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.suites import swiglu as S
from fusedmlp.bench import harness
shape = (16384, 512, 1792)
inputs, g = S._make_inputs(shape, torch.bfloat16)
res = {}
for impl in ("fused", "fused_recompute", "compile", "liger", "quack", "quack_recompute"):
    fwd = S._forward_fn(impl)
    inp = harness.own_inputs(fwd, inputs)
    wrt = [t for t in inp if t.requires_grad]
    for mode in ("fwd", "fwd+bwd"):
        step = (lambda: fwd(*inp)) if mode == "fwd" else (lambda: torch.autograd.grad(fwd(*inp), wrt, g))
        for _ in range(5): step()
        torch.cuda.synchronize()
        rounds = []
        for r in range(3):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20): step()
                torch.cuda.synchronize()
            us = sum(getattr(e, "device_time", 0) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            rounds.append(us / 20)
        res[f"{impl} {mode}"] = sorted(rounds)[1]
        print(impl, mode, [round(u, 1) for u in rounds], flush=True)
json.dump(dict(shape=shape, device=torch.cuda.get_device_name(), us_per_step=res), open(os.path.join(os.environ.get("OUT", "."), "kernel_time.json"), "w"), indent=1)
