"""test_every_config_on_gpu[0]'s first check under contention: 12 processes loop it on random
seeds at once; any gradient over its bound is rerun alone to see whether the bits change."""
import json
import os
import subprocess
import sys

WORKER = r'''
import os, sys, json, time
sys.path.insert(0, "tests")
os.environ.setdefault("FUSEDMLP_AUTOTUNE", "0")
import torch
import test_mlp as T
from helpers import TOLERANCE, rel_err
import fusedmlp
M = T.mlp_ops
fwd, dg = M._fwd_launcher.configs[0], M._dgrad_launcher.configs[0]
dtype = torch.float16
fused = lambda x, ws, bs: fusedmlp.mlp(x, ws, bs, "relu", "sigmoid")
ref = lambda x, ws, bs: fusedmlp.mlp_reference(x, ws, bs, "relu", "sigmoid")
names = ["y", "x"] + [f"{k}{i}" for i in range(3) for k in "Wb"]
def once(seed):
    torch.manual_seed(seed)
    x, weights, biases, g = T.make_stack([13, 40, 24, 8], "cuda", True, (300,))
    g = g + 1.0
    with M._fwd_launcher.forcing(fwd), M._dgrad_launcher.forcing(dg):
        y, grads = T.forward_and_grads(fused, x, weights, biases, g, dtype, [True] * 7)
    rounded = lambda ts: [t.to(dtype).double() for t in ts]
    y64, g64 = T.forward_and_grads(ref, rounded([x])[0], rounded(weights), rounded(biases), g, torch.float64, [True] * 7)
    ye, ge = T.forward_and_grads(ref, x, weights, biases, g, dtype, [True] * 7)
    out = []
    for n, got, want, base in zip(names, [y] + grads, [y64] + g64, [ye] + ge):
        bound = max(TOLERANCE[dtype], 2 * rel_err(base, want))
        out.append((n, rel_err(got, want), rel_err(base, want), bound))
    return out, [t.clone() for t in [y] + grads]
bad, n, worst = [], 0, 0.0
end = time.time() + float(sys.argv[1])
while time.time() < end:
    seed = int.from_bytes(os.urandom(4), "little")
    out, bits = once(seed)
    n += 1
    for name, e, b, bound in out:
        worst = max(worst, e / bound)
        if e >= bound:
            again, bits2 = once(seed)
            same = all(torch.equal(a, c) for a, c in zip(bits, bits2))
            bad.append(dict(seed=seed, name=name, err=e, eager=b, bound=bound, rerun_err=dict((k, v) for k, v, _, _ in again)[name], same_bits=same))
print(json.dumps(dict(checks=n, worst_ratio=worst, over=bad)))
'''

procs = [subprocess.Popen([sys.executable, "-c", WORKER, sys.argv[1] if len(sys.argv) > 1 else "60"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(12)]
results = []
for p in procs:
    out, err = p.communicate()
    try:
        results.append(json.loads(out.strip().splitlines()[-1]))
    except Exception:
        results.append(dict(error=err[-500:]))
total = sum(r.get("checks", 0) for r in results)
over = [o for r in results for o in r.get("over", [])]
print("checks:", total, "worst ratio:", max(r.get("worst_ratio", 0) for r in results), "over:", len(over))
for o in over[:10]:
    print(o)
for r in results:
    if "error" in r:
        print("worker error:", r["error"])
with open(os.path.join(os.environ.get("OUT", "."), "contention.json"), "w") as f:
    json.dump(results, f, indent=1)
