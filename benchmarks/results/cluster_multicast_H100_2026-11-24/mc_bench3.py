"""The cluster kernel's tile groups: GROUP_M counts 256-row cluster tiles, so GROUP_M = 8 groups
2048 rows where the library's 128-row kernels group 1024. Smaller groups at the long-K shapes."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(__file__))
import mc_linear
import fusedmlp
from fusedmlp.ops import linear_act as la_ops
from mc_timing import GLU, bench, geglu_case, linear_case, new_record, report, save

out = new_record()

with torch.no_grad():
    for (M, K, N) in [(16384, 4096, 14336), (16384, 1024, 4096)]:
        x, w, b, y, common = linear_case(M, K, N)
        report(out, "linear", [M, K, N], bench({
            "mm": lambda: torch.mm(x, w.T, out=y),
            "lib_alt": lambda: la_ops._launch_fwd_pingpong(x, w, b, y, y, common, "alternating"),
            "mc64_g8": lambda: mc_linear.run(x, w, b, y=y, clusters=64),
            "mc64_g4": lambda: mc_linear.run(x, w, b, y=y, clusters=64, GROUP_M=4),
            "mc64_g2": lambda: mc_linear.run(x, w, b, y=y, clusters=64, GROUP_M=2),
            "mc66_g4": lambda: mc_linear.run(x, w, b, y=y, GROUP_M=4),
            "mc64_g4_s5": lambda: mc_linear.run(x, w, b, y=y, clusters=64, GROUP_M=4, STAGES=5),
            "nomc64_g4": lambda: mc_linear.run(x, w, b, y=y, clusters=64, GROUP_M=4, MULTICAST=False),
        }, rounds=3, rep=120))
    for (M, d) in [(16384, 4096), (16384, 1024), (16384, 2048)]:
        x, w, b, y, hh = geglu_case(M, d)
        report(out, "geglu", [M, d], bench({
            "mm": lambda: torch.mm(x, w.T, out=hh),
            "lib": lambda: fusedmlp.geglu(x, w, b),
            "mc64_g8": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **GLU),
            "mc64_g4": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **dict(GLU, GROUP_M=4)),
            "mc64_g2": lambda: mc_linear.run(x, w, b, y=y, clusters=64, **dict(GLU, GROUP_M=2)),
            "mc66_g4": lambda: mc_linear.run(x, w, b, y=y, **dict(GLU, GROUP_M=4)),
            "nomc64_g4": lambda: mc_linear.run(x, w, b, y=y, clusters=64, MULTICAST=False, **dict(GLU, GROUP_M=4)),
        }, rounds=3, rep=120))
save(out, "mc_bench3.json")
