"""x's gradient in test_every_config_on_gpu[0]'s first check (13-40-24-8, relu / sigmoid, fp16,
300 rows, the first forward and dgrad configs): its error against float64 over many seeds,
beside eager's, and whether 5 runs of one seed give the same bits (seeds below 200).

    PYTHONPATH=src python benchmarks/mlp_dx_tolerance_seeds.py 2000
"""
import sys
sys.path.insert(0, "tests")
import os
os.environ.setdefault("FUSEDMLP_AUTOTUNE", "0")
import torch
import test_mlp as T
from helpers import rel_err
import fusedmlp

M = T.mlp_ops
fwd, dg = M._fwd_launcher.configs[0], M._dgrad_launcher.configs[0]
dtype = torch.float16
sizes = [13, 40, 24, 8]
wants = [True] * 7
fused = lambda x, ws, bs: fusedmlp.mlp(x, ws, bs, "relu", "sigmoid")
ref = lambda x, ws, bs: fusedmlp.mlp_reference(x, ws, bs, "relu", "sigmoid")
errs, mismatches = [], 0
for seed in range(int(sys.argv[1])):
    torch.manual_seed(seed)
    x, weights, biases, g = T.make_stack(sizes, "cuda", True, (300,))
    g = g + 1.0
    with M._fwd_launcher.forcing(fwd), M._dgrad_launcher.forcing(dg):
        runs = [T.forward_and_grads(fused, x, weights, biases, g, dtype, wants) for _ in range(5 if seed < 200 else 1)]
    for y, grads in runs[1:]:
        if not all(torch.equal(a, b) for a, b in zip([y] + grads, [runs[0][0]] + runs[0][1])):
            mismatches += 1
    rounded = lambda ts: [t.to(dtype).double() for t in ts]
    y64, g64 = T.forward_and_grads(ref, rounded([x])[0], rounded(weights), rounded(biases), g, torch.float64, wants)
    ye, ge = T.forward_and_grads(ref, x, weights, biases, g, dtype, wants)
    errs.append((rel_err(runs[0][1][0], g64[0]), rel_err(ge[0], g64[0]), seed))
errs.sort(reverse=True)
print("repeat mismatches:", mismatches)
print("x worst:", [(f"{e:.2e}", f"eager {b:.2e}", s) for e, b, s in errs[:8]])
print("x median:", f"{errs[len(errs) // 2][0]:.2e}", "over 5e-3 and over 2x eager:", sum(e >= max(5e-3, 2 * b) for e, b, _ in errs), "of", len(errs))
