"""GEGLU recompute step with each gate activation: graphed fwd+bwd ms (CUDA graphs, L2 flushed)."""
import sys, torch, json, os
sys.path.insert(0, "src")
import fusedmlp
from fusedmlp.bench.harness import graph_steps, median_ms
out = {}
for d, n in ((1024, 32768), (4096, 8192)):
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(8 * d, d, device="cuda") / d**0.5).bfloat16().requires_grad_()
    b = torch.randn(8 * d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(n, 4 * d, device="cuda", dtype=torch.bfloat16)
    for rnd in range(2):
        for act in ("gelu_tanh", "gelu", "silu", "identity"):
            for recompute in (True, False):
                steps = graph_steps(lambda x, w, b: fusedmlp.geglu(x, w, b, recompute=recompute, activation=act), (x, w, b), g)
                ms = median_ms(steps["fwd+bwd"])
                out.setdefault(f"{d}x{n} {act} recompute={recompute}", []).append(ms)
                del steps
for k, v in out.items():
    print(f"{k:40s} " + " ".join(f"{t:.3f}" for t in v))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "gelu_dh.json"), "w"), indent=1)
