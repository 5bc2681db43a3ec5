"""Probe (throwaway): where the GEGLU store-mode step's time goes on this GPU, and the linear
forward's epilogue cost at K = 512. Writes $OUT/probe.json."""
import collections
import json
import os

import torch
import triton
from torch.profiler import ProfilerActivity, profile

import fusedmlp
from fusedmlp.ops.linear_act import linear_act_forward_impl, linear_forward_form

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
out = {}


def step_breakdown(fn, reps=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name[:90]] += ev.device_time_total / reps / 1e3  # ms
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return {"kernels_ms": dict(sorted(per.items(), key=lambda kv: -kv[1])), "kernel_sum_ms": sum(per.values()),
            "wall_ms": start.elapsed_time(stop) / reps}


for d, n in ((1024, 32768), (2048, 16384), (4096, 16384)):
    x = torch.randn(n, d, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(8 * d, d, device=dev) / d ** 0.5).to(dt).requires_grad_()
    b = torch.randn(8 * d, device=dev, dtype=dt).requires_grad_()
    gy = torch.randn(n, 4 * d, device=dev, dtype=dt)

    def store_step():
        x.grad = w.grad = b.grad = None
        fusedmlp.geglu(x, w, b, recompute=False).backward(gy)

    def gemms():
        dh = torch.empty(n, 8 * d, device=dev, dtype=dt)
        torch.mm(x.detach(), w.detach().t(), out=dh)
        dh @ w.detach()
        dh.t() @ x.detach()

    r = {"store": step_breakdown(store_step), "three_gemms": step_breakdown(gemms)}
    out[f"geglu d{d} N{n}"] = r
    s = r["store"]
    print(f"geglu d{d} N{n}: store wall {s['wall_ms']:.3f} kernels {s['kernel_sum_ms']:.3f}; "
          f"gemms wall {r['three_gemms']['wall_ms']:.3f}", flush=True)
    for k, v in list(s["kernels_ms"].items())[:8]:
        print(f"    {v:8.3f}  {k}", flush=True)


def graph_us(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=300) * 1e3


m, k, nn = 16384, 512, 1792
x = torch.randn(m, k, device=dev, dtype=dt)
w = (torch.randn(nn, k, device=dev) / k ** 0.5).to(dt)
b = torch.randn(nn, device=dev, dtype=dt)
row = {"cublas": graph_us(lambda: x @ w.T)}
for form in ("alternating", "cooperative", "wide", "tma"):
    with linear_forward_form.forcing(form):
        for act, bias in (("identity", None), ("identity", b), ("relu", b), ("gelu_tanh", b), ("silu", b)):
            row[f"{form} {act}{' +b' if bias is not None else ''}"] = graph_us(
                lambda: linear_act_forward_impl(x, w, bias, act, False))
out["linear 16384x512->1792 us"] = row
for key, v in row.items():
    print(f"linear 512->1792 {key:32s} {v:7.1f} us ({v / row['cublas']:.3f}x)", flush=True)

with open(os.path.join(os.environ.get("OUT", "."), "probe.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": out}, f, indent=1)
