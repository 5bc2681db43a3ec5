import os, sys
import torch, triton
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(__file__))
import mc_linear
import fusedmlp
from fusedmlp.ops import linear_act as la_ops
from mc_timing import GLU, bench, geglu_case, linear_case, new_record, report, save

out = new_record()

def rel(a, r):
    return ((a.double() - r).abs().max() / r.abs().max()).item()

for (M, K, N, paired) in [(4096, 1024, 4096, False), (4096, 1024, 4096, True)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * N if paired else N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    b = torch.randn(w.shape[0], device="cuda", dtype=torch.bfloat16)
    h = x.double() @ w.double().T + b.double()
    if paired:
        r = h[:, :N] * F.gelu(h[:, N:], approximate="tanh")
        lib = fusedmlp.geglu(x, w, b)
        y = mc_linear.run(x, w, b, **GLU)
        again = mc_linear.run(x, w, b, **GLU)
    else:
        r = F.gelu(h, approximate="tanh")
        lib = fusedmlp.linear_act(x, w, b, activation="gelu_tanh")
        y = mc_linear.run(x, w, b)
        again = mc_linear.run(x, w, b, FORWARD=False)
    torch.cuda.synchronize()
    row = {"check": [M, K, N, paired], "mc_err": rel(y, r), "lib_err": rel(lib, r), "repeat_same": torch.equal(y, again)}
    print(row, flush=True)
    out["rows"].append(row)

try:
    for paired in (False, True):
        xx = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
        mc_linear.run(xx, torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16), None, paired=paired,
                      **(dict(BN=64, STAGES=5) if paired else {}))
        L = mc_linear.LAST
        n = triton.runtime.driver.active.utils.cuOccupancyMaxActiveClusters(L.function, L.metadata.shared, 2)
        print("max active 2-CTA clusters", "paired" if paired else "linear", n, "shared", L.metadata.shared, flush=True)
        out["max_active_clusters_" + ("paired" if paired else "linear")] = n
except Exception as e:
    print("occupancy query failed", repr(e))

with torch.no_grad():
    for (M, K, N) in [(16384, 512, 1792), (16384, 1024, 4096), (16384, 4096, 14336)]:
        x, w, b, y, common = linear_case(M, K, N)
        report(out, "linear", [M, K, N], bench({
            "mm": lambda: torch.mm(x, w.T, out=y),
            "lib": lambda: fusedmlp.linear_act(x, w, b, activation="gelu_tanh"),
            "lib_alt": lambda: la_ops._launch_fwd_pingpong(x, w, b, y, y, common, "alternating"),
            "mc66": lambda: mc_linear.run(x, w, b, y=y),
            "mc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64),
            "mc64_s5": lambda: mc_linear.run(x, w, b, y=y, clusters=64, STAGES=5),
            "mc64_g16": lambda: mc_linear.run(x, w, b, y=y, clusters=64, GROUP_M=16),
        }, rounds=2, rep=150))
    for (M, d) in [(8192, 1024), (16384, 1024), (65536, 1024), (8192, 2048), (16384, 2048), (16384, 4096)]:
        x, w, b, y, hh = geglu_case(M, d)
        report(out, "geglu", [M, d], bench({
            "mm": lambda: torch.mm(x, w.T, out=hh),
            "lib": lambda: fusedmlp.geglu(x, w, b),
            "mc66": lambda: mc_linear.run(x, w, b, y=y, **GLU),
            "mc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **GLU),
            "mc64_s6": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **dict(GLU, STAGES=6)),
            "mc64_g16": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **dict(GLU, GROUP_M=16)),
        }, rounds=2, rep=150))
save(out, "mc_bench.json")
