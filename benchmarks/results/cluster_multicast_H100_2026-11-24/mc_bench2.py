"""The cluster kernel with and without W multicast (each CTA loading its own W copy): is the
long-K loss the multicast's pairing or the 2-CTA cluster launch and its 256-row schedule?"""
import os, sys
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(__file__))
import mc_linear
import fusedmlp
from fusedmlp.ops import linear_act as la_ops
from mc_timing import GLU, bench, geglu_case, linear_case, new_record, report, save

out = new_record()
for paired in (False, True):
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16) / 32
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    h = x.double() @ w.double().T + b.double()
    r = h[:, :2048] * F.gelu(h[:, 2048:], approximate="tanh") if paired else F.gelu(h, approximate="tanh")
    y = mc_linear.run(x, w, b, MULTICAST=False, **(GLU if paired else {}))
    e = ((y.double() - r).abs().max() / r.abs().max()).item()
    print("check no-multicast", "paired" if paired else "linear", f"{e:.2e}", flush=True)
    out["rows"].append({"check_no_multicast": paired, "err": e})

with torch.no_grad():
    for (M, K, N) in [(16384, 512, 1792), (16384, 1024, 4096), (16384, 4096, 14336)]:
        x, w, b, y, common = linear_case(M, K, N)
        report(out, "linear", [M, K, N], bench({
            "mm": lambda: torch.mm(x, w.T, out=y),
            "lib_alt": lambda: la_ops._launch_fwd_pingpong(x, w, b, y, y, common, "alternating"),
            "mc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64),
            "nomc66": lambda: mc_linear.run(x, w, b, y=y, MULTICAST=False),
            "nomc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64, MULTICAST=False),
        }, rounds=3, rep=120))
    for (M, d) in [(16384, 1024), (16384, 4096)]:
        x, w, b, y, hh = geglu_case(M, d)
        report(out, "geglu", [M, d], bench({
            "mm": lambda: torch.mm(x, w.T, out=hh),
            "lib": lambda: fusedmlp.geglu(x, w, b),
            "mc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **GLU),
            "nomc66": lambda: mc_linear.run(x, w, b, y=y, MULTICAST=False, **GLU),
            "nomc64": lambda: mc_linear.run(x, w, b, y=y, clusters=64, MULTICAST=False, **GLU),
        }, rounds=3, rep=120))
save(out, "mc_bench2.json")
