"""CPU (the interpreter): tests/test_fuzz.py's MLP cases by seed (seeds 0..N-1, or $SEEDS with
N = 0), each tensor's error fused and eager against float64, and R more eager samples on the
inputs moved by up to one rounding unit; counts the tensors over the bound each way (twice
eager, fp32 the tolerance; twice the worst of eager and the samples) and the fused / eager
error ratio's distribution. Usage: PYTHONPATH=src python3 ratios.py N R"""
import os, sys, math
os.environ.setdefault("FUSEDMLP_AUTOTUNE", "0")
if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, "tests")
import torch, test_fuzz
from helpers import rel_err
rows = []
def collect(fused, reference, masters, g64, dtype, rng, what, replicas=0):
    rounded = [None if t is None else t.detach().to(dtype) for t in masters]
    x, kind = test_fuzz.layout(rounded[0], rng)
    wants = [t is not None and t.requires_grad for t in masters]
    def run(fn, tensors, dt):
        leaves = [None if t is None else t.detach().to(dt).requires_grad_(w) for t, w in zip(tensors, wants)]
        y = fn(*leaves); wrt = [t for t in leaves if t is not None and t.requires_grad]
        return [y, *torch.autograd.grad(y, wrt, g64.to(dt))]
    e = run(reference, rounded, dtype)
    if not all(torch.isfinite(t).all() for t in e): return
    got = run(fused, [x] + rounded[1:], dtype); want = run(reference, rounded, torch.float64)
    eps = torch.finfo(dtype).eps
    samples = []
    for r in range(REPLICAS):
        gen = torch.Generator(device=masters[0].device).manual_seed(r)
        pert = [None if t is None else (t.detach() * (1 + eps * (2 * torch.rand(t.shape, generator=gen, dtype=t.dtype, device=t.device) - 1))).to(dtype) for t in masters]
        pe, pw = run(reference, pert, dtype), run(reference, pert, torch.float64)
        samples.append([rel_err(a, b) for a, b in zip(pe, pw)])
    tol = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 2e-5}[dtype]
    for k in range(len(want)):
        fe, ee = rel_err(got[k], want[k]), rel_err(e[k], want[k])
        worst = max([ee] + [sm[k] for sm in samples])
        rows.append((str(dtype), what, k, fe, ee, worst, fe >= max(tol, 2 * ee) if dtype != torch.float32 else fe >= tol, fe >= max(tol, 2 * worst)))
test_fuzz.check_case = collect
n = int(sys.argv[1]); REPLICAS = int(sys.argv[2])
for s in (range(n) if n > 0 else [int(v) for v in os.environ["SEEDS"].split()]):
    torch.manual_seed(s)
    try:
        test_fuzz.test_mlp(0, s)
    except BaseException as e:  # pytest.skip: every row at relu's kink, or eager overflows
        if type(e).__name__ != "Skipped":
            raise
        print("seed", s, "skipped:", e)
for dt in sorted(set(r[0] for r in rows)):
    rs = [math.log10(r[3] / r[4]) for r in rows if r[0] == dt and r[4] > 0 and r[3] > 0]
    rs.sort()
    q = lambda p: 10 ** rs[int(p * (len(rs) - 1))]
    fails_old = sum(r[6] for r in rows if r[0] == dt); fails_new = sum(r[7] for r in rows if r[0] == dt)
    print(f"{dt}: fails with 2x eager (fp32: tol) {fails_old}, with 2x worst of eager+replicas {fails_new}")
    print(f"{dt}: {len(rs)} tensors, fused/eager error ratio median {q(.5):.2f}, p90 {q(.9):.2f}, p99 {q(.99):.2f}, max {q(1):.2f}, >2: {sum(r > math.log10(2) for r in rs)}")
worst = sorted(rows, key=lambda r: -r[3] / max(r[4], 1e-30))[:8]
for r in worst: print(f"  {r[3]/r[4]:.2f} {r[0]} {r[1]} tensor {r[2]} fused {r[3]:.2e} eager {r[4]:.2e} worst {r[5]:.2e}")
for r in rows:
    if r[7]: print("NEW FAIL", r)
