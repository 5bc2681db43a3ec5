"""Host us of pieces of the dgrad fork."""
import time, torch, cProfile, pstats, io
import fusedmlp.ops.lora as ops
from fusedmlp.ops._common import _side_stream
m, d, r = 8192, 4096, 16
dpre = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)
w = (torch.randn(d, d, device="cuda") / d**0.5).bfloat16()
a = (torch.randn(r, d, device="cuda") / d**0.5).bfloat16()
d_xa = torch.randn(m, r, device="cuda", dtype=torch.bfloat16)
hi = _side_stream(0)[0]
noop = [lambda: None]
def after():
    ops.BESIDE_DGRAD_MIN_MACS = 1 << 62
    ops._dgrad_with_tail(dpre, w, d_xa, a, noop)
def beside():
    ops.BESIDE_DGRAD_MIN_MACS = 0
    ops._dgrad_with_tail(dpre, w, d_xa, a, noop)
def on_hi_only():
    ops.BESIDE_DGRAD_MIN_MACS = 1 << 62
    with torch.cuda.stream(hi):
        ops._dgrad_with_tail(dpre, w, d_xa, a, noop)
def mm_main():
    torch.mm(dpre[:64], w)
def mm_hi():
    with torch.cuda.stream(hi):
        torch.mm(dpre[:64], w)
cases = dict(after=after, beside=beside, on_hi_only=on_hi_only, mm_main=mm_main, mm_hi=mm_hi)
for f in cases.values():
    f(); f()
torch.cuda.synchronize()
res = {n: [] for n in cases}
for rnd in range(6):
    for n, f in (list(cases.items()) if rnd % 2 == 0 else list(cases.items())[::-1]):
        torch.cuda._sleep(int(2e8)); hi.wait_stream(torch.cuda.current_stream())
        t0 = time.perf_counter()
        for _ in range(50):
            f()
        res[n].append((time.perf_counter() - t0) / 50 * 1e6)
        torch.cuda.synchronize()
for n, v in res.items():
    v = sorted(v)
    print(f"{n:12s} host us: median {v[len(v)//2]:.1f} min {v[0]:.1f} max {v[-1]:.1f}")
