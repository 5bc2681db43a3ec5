"""Timeline of one graphed GEGLU recompute fwd+bwd step (kernels, streams, gaps) and event times."""
import sys, time, torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import median_ms, graph_steps
from fusedmlp.bench.suites.glu import _forward_fn, _make_inputs
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
for shape in [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]]:
    inputs, g = _make_inputs(shape, torch.bfloat16)
    replay = graph_steps(_forward_fn("fused"), inputs, g)["fwd+bwd"]
    def timed(n=20):
        evs = []
        for _ in range(n):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); replay(); e.record(); evs.append((s, e))
        torch.cuda.synchronize()
        v = sorted(s.elapsed_time(e) * 1e3 for s, e in evs); return v[len(v) // 2]
    print(shape, "do_bench", round(median_ms(replay) * 1e3), "events", round(timed()))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        on = timed(3)
    ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: e.time_range.start)
    flushes = [i for i, e in enumerate(ks) if "FillFunc" in e.name and e.device_time > 40]
    st = ks[flushes[-1] + 1:]
    t0 = ks[flushes[-1]].time_range.end
    print(f"  events under profiler {on:.0f}; last step:")
    prev_end = t0
    for e in st:
        gap = e.time_range.start - prev_end
        print(f"    start {e.time_range.start - t0:8.1f} dur {e.device_time:7.1f} gap {gap:6.1f}  {e.name[:80]}")
        prev_end = max(prev_end, e.time_range.end)
