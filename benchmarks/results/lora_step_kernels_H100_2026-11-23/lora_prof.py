"""Kernels of the graphed LoRA steps (fused and eager), bench lora's inputs."""
import collections, json, os, sys
import torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import median_ms, graph_steps
from fusedmlp.bench.suites.lora import _forward_fn, _make_inputs

out = {}
for shape in ((8192, 4096, 16), (32768, 4096, 16), (32768, 1024, 16)):
    inputs, g = _make_inputs(shape, torch.bfloat16)
    for impl in ("fused", "eager"):
        for mode, replay in graph_steps(_forward_fn(impl), inputs, g).items():
            t = [median_ms(replay) * 1e3 for _ in range(2)]
            key = f"{shape} {impl} {mode}"
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    replay()
                torch.cuda.synchronize()
            kern = collections.defaultdict(list)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kern[e.name].append(e.device_time)
            ks = sorted(((n, sum(v) / 10, len(v) / 10) for n, v in kern.items()), key=lambda r: -r[1])
            out[key] = {"us": t, "kernels": [(n[:100], round(us, 2), c) for n, us, c in ks]}
            print(f"{key}: us {['%.1f' % x for x in t]} sum kernels {sum(k[1] for k in ks):.1f}", flush=True)
            for n, us, c in ks:
                print(f"    {us:8.2f} x{c:.0f}  {n[:100]}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "lora_prof.json"), "w"), indent=1)
