"""Per-step timelines of the graphed fused LoRA step with an L2 flush before each replay (do_bench's way)."""
import collections, json, os, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import median_ms, graph_steps
from fusedmlp.bench.suites.lora import _forward_fn, _make_inputs
import fusedmlp.ops.lora as ops

shape = tuple(int(v) for v in sys.argv[1].split("x"))
inputs, g = _make_inputs(shape, torch.bfloat16)
out = {}
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
for variant, mins in (("beside", ops.BESIDE_DGRAD_MIN_MACS), ("after", 1 << 62)):
    ops.BESIDE_DGRAD_MIN_MACS = mins
    replay = graph_steps(_forward_fn("fused"), inputs, g)["fwd+bwd"]
    ops.BESIDE_DGRAD_MIN_MACS = 2**36
    for flushed in (True, False):
        def step():
            if flushed: flush.zero_()
            replay()
        # do_bench-like event timing
        t0 = time.time()
        while time.time() - t0 < 0.3:
            for _ in range(10): step()
            torch.cuda.synchronize()
        evs = []
        for _ in range(30):
            if flushed: flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); replay(); e.record(); evs.append((s, e))
        torch.cuda.synchronize()
        ev_ms = sorted(s.elapsed_time(e) * 1e3 for s, e in evs)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(8):
                step()
            torch.cuda.synchronize()
        ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        ks.sort(key=lambda e: e.time_range.start)
        # split into steps at the flush memsets / the first kernel (fill) of each replay
        steps, cur = [], []
        for e in ks:
            if ("FillFunc" in e.name or "Memset" in e.name) and e.device_time > 20 or (not flushed and "FillFunc" in e.name):
                if cur: steps.append(cur)
                cur = []
            cur.append(e)
        steps.append(cur)
        print(f"{variant} flushed={flushed}: event-timed us median {ev_ms[15]:.1f} min {ev_ms[0]:.1f} max {ev_ms[-1]:.1f}", flush=True)
        rows = []
        for st in steps[1:-1]:
            t = st[0].time_range.start
            desc = " | ".join(f"{e.name[:18]}@{e.time_range.start - t:.0f}+{e.device_time:.0f}" for e in st)
            print("   ", desc)
            rows.append(desc)
        out[f"{variant} flushed={flushed}"] = dict(event_us=ev_ms, steps=rows)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "lora_timeline2.json"), "w"), indent=1)
