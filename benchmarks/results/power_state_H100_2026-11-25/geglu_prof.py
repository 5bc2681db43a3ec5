"""Kernels of the graphed GEGLU fwd+bwd steps (recompute, store) and the 3-GEMM floor."""
import collections, json, os, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import median_ms, graph_steps
from fusedmlp.bench.suites.glu import _forward_fn, _make_inputs, _gemm_steps
from fusedmlp._cuda_graph import capture_cuda_graph
out = {}
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
for shape in [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]]:
    inputs, g = _make_inputs(shape, torch.bfloat16)
    steps = {impl: graph_steps(_forward_fn(impl), inputs, g)["fwd+bwd"] for impl in ("fused", "fused_store")}
    steps["gemm"] = capture_cuda_graph(_gemm_steps(inputs, g)["fwd+bwd"])[0].replay
    for name, replay in steps.items():
        ms = median_ms(replay)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                flush.zero_(); replay()
            torch.cuda.synchronize()
        ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: e.time_range.start)
        kern = collections.defaultdict(list)
        for e in ks:
            if "FillFunc" in e.name and e.device_time > 40: continue  # the flush
            kern[e.name[:90]].append(e.device_time)
        rows = sorted(((n, sum(v) / 5, len(v) / 5) for n, v in kern.items()), key=lambda r: -r[1])
        print(f"{shape} {name}: do_bench {ms*1e3:.0f} us, kernels sum {sum(r[1] for r in rows):.0f} us", flush=True)
        for n, us, c in rows:
            print(f"    {us:8.1f} x{c:.0f}  {n}")
        out[f"{shape} {name}"] = dict(ms=ms, kernels=rows)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "geglu_prof.json"), "w"), indent=1)
