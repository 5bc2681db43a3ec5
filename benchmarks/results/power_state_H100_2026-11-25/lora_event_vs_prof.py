"""Event-timed graphed fused LoRA step with and without the profiler running, same loop."""
import sys, time, torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import graph_steps
from fusedmlp.bench.suites.lora import _forward_fn, _make_inputs
import fusedmlp.ops.lora as ops
shape = tuple(int(v) for v in sys.argv[1].split("x"))
inputs, g = _make_inputs(shape, torch.bfloat16)
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
replays = {}
for name, mins in (("beside", 2**36), ("after", 1 << 62)):
    ops.BESIDE_DGRAD_MIN_MACS = mins
    replays[name] = graph_steps(_forward_fn("fused"), inputs, g)["fwd+bwd"]
ops.BESIDE_DGRAD_MIN_MACS = 2**36
x, w = inputs[0].detach(), inputs[1]
def gemm():
    torch.mm(x, w.t()); torch.mm(g, w)
replays["gemm"] = gemm
def timed(replay, n=30):
    evs = []
    for _ in range(n):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); replay(); e.record(); evs.append((s, e))
    torch.cuda.synchronize()
    v = sorted(s.elapsed_time(e) * 1e3 for s, e in evs)
    return v[len(v) // 2]
for rnd in range(3):
    for name, replay in replays.items():
        t0 = time.time()
        while time.time() - t0 < 0.25:
            for _ in range(10): flush.zero_(); replay()
            torch.cuda.synchronize()
        off1 = timed(replay)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            on = timed(replay)
        ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: e.time_range.start)
        starts = [i for i, e in enumerate(ks) if e.device_time > 20 and ("Memset" in e.name or "FillFunc" in e.name) and e.device_time < 200 and "nvjet" not in e.name]
        spans = sorted(max(e.time_range.end for e in ks[a + 1:b]) - ks[a].time_range.end for a, b in zip(starts, starts[1:] + [len(ks)]) if b > a + 1)
        off2 = timed(replay)
        print(f"round {rnd} {name:7s} events: profiler off {off1:.1f}  on {on:.1f}  off again {off2:.1f}   kernel span under profiler {spans[len(spans)//2]:.1f} ({len(spans)} steps)", flush=True)
