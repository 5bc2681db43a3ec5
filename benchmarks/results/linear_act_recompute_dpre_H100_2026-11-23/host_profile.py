"""linear_act at 16384 x 512 -> 1792 (bf16): host us per call (the GPU kept busy behind a
sleep, so no launch waits), the kernels of one fwd+bwd step, and cProfile of the backward."""
import cProfile, pstats, statistics, sys, time
import torch
from fusedmlp.ops.linear_act import linear_act, linear_act_reference

torch.autograd.set_multithreading_enabled(False)
dt = torch.bfloat16
m, k, n = 16384, 512, 1792
x = torch.randn(m, k, device="cuda", dtype=dt, requires_grad=True)
w = (torch.randn(n, k, device="cuda") / k**0.5).to(dt).requires_grad_()
b = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
g = torch.randn(m, n, device="cuda", dtype=dt)


def host(fn, calls=60):
    fn(); fn(); torch.cuda.synchronize(); out = []
    for _ in range(5):
        torch.cuda._sleep(int(4e8)); t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6); torch.cuda.synchronize()
    return statistics.median(out)


def step(fwd):
    return lambda: torch.autograd.grad(fwd(), (x, w, b), g)


fused = lambda: linear_act(x, w, b, "gelu_tanh", False)  # noqa: E731
fused_pre = lambda: linear_act(x, w, b, "gelu_tanh", True)  # noqa: E731
eager = lambda: linear_act_reference(x, w, b, "gelu_tanh")  # noqa: E731
rows = {"fused fwd": fused, "fused_preact fwd": fused_pre, "eager fwd": eager,
        "fused fwd+bwd": step(fused), "fused_preact fwd+bwd": step(fused_pre), "eager fwd+bwd": step(eager)}
for name, fn in rows.items():
    print(f"{host(fn):9.1f} us host  {name}", flush=True)

for name in ("fused fwd+bwd", "fused_preact fwd+bwd"):
    fn = rows[name]
    fn(); torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(); torch.cuda.synchronize()
    print(f"-- kernels of one {name} step")
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            print(f"   {e.device_time / 1:9.1f} us  {e.name[:90]}")

for name in ("fused fwd+bwd", "fused_preact fwd+bwd"):
    fn = rows[name]
    torch.cuda._sleep(int(4e8))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(40):
        fn()
    pr.disable(); torch.cuda.synchronize()
    print(f"-- cProfile, 40 calls of {name}, by tottime")
    pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(22)
