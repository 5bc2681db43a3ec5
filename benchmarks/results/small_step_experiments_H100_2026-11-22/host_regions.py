"""Host us per step in nested regions (inclusive), GPU kept busy so nothing waits on it."""
import time, collections, functools, torch
import fusedmlp
import fusedmlp.ops.swiglu as sw, fusedmlp.ops.glu as glu, fusedmlp.ops._common as common, fusedmlp.ops.lora as lora
import fusedmlp.kernels.launch as L
torch.autograd.set_multithreading_enabled(False)
acc = collections.defaultdict(float)
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or f"{mod.__name__.split('.')[-1]}.{name}"
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter_ns()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter_ns() - t
    setattr(mod, name, g)
for mod, name in [(sw, "_forward_impl"), (sw, "_backward"), (sw, "glu_forward_impl"), (sw, "glu_backward_dh_impl"),
                  (glu, "_launch_fwd"), (glu, "_launch_bwd_dh"), (glu, "launch_pingpong"), (glu, "pingpong_eligible"),
                  (common, "launch"), (L.FastLaunch, "call"), (torch, "mm"), (torch, "empty"),
                  (lora, "lora_forward_impl") if hasattr(lora, "lora_forward_impl") else (common, "tma_eligible")]:
    wrap(mod, name)
dt = torch.bfloat16; dev = "cuda"
def leaf(*s, scale=1.0): return (torch.randn(*s, device=dev) * scale).to(dt).requires_grad_()
x = leaf(16384, 512); wg, wu, wd = leaf(1792, 512, scale=512**-.5), leaf(1792, 512, scale=512**-.5), leaf(512, 1792, scale=1792**-.5)
gy = torch.randn(16384, 512, device=dev, dtype=dt)
cases = {
  "swiglu fwd": lambda: fusedmlp.swiglu(x, wg, wu, wd),
  "swiglu fwd+bwd": lambda: torch.autograd.grad(fusedmlp.swiglu(x, wg, wu, wd), (x, wg, wu, wd), gy),
  "eager swiglu fwd+bwd": lambda: torch.autograd.grad(fusedmlp.swiglu_reference(x, wg, wu, wd), (x, wg, wu, wd), gy),
}
for label, fn in cases.items():
    for variant in (True, False):
        L.REPLAY = variant
        for _ in range(5): fn()
        torch.cuda.synchronize(); acc.clear()
        calls = 40; samples = []
        for r in range(5):
            torch.cuda._sleep(int(4e8))
            t = time.perf_counter()
            for _ in range(calls): fn()
            samples.append((time.perf_counter() - t) / calls * 1e6)
            torch.cuda.synchronize()
        n = 5 * calls
        print(f"== {label} replay={variant}: step {sorted(samples)[2]:.0f} us (runs {min(samples):.0f}-{max(samples):.0f})")
        for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
            print(f"   {v / n / 1e3:8.1f} us  {k}")
