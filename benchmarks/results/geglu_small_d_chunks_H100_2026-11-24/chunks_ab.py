"""GEGLU recompute fwd+bwd at small d: one dh piece vs 2 column / 2 row chunks; plain and graphed, peak."""
import json, os, sys
import torch
import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import environment, measure, graph_steps, median_ms
from fusedmlp.bench.suites.glu import _gemm_steps, _make_inputs

shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
plans = sys.argv[2].split(",")
# the plans of benchmarks/geglu_dh_chunks.py (two folders up)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 2))
from geglu_dh_chunks import library_rule, plan_of  # noqa: E402

rows = []
forward = lambda x, w, b: glu.geglu(x, w, b, recompute=True)
for d, n in shapes:
    inputs, g = _make_inputs((d, n), torch.bfloat16)
    floor_ms, _, _ = measure(None, "fwd+bwd", inputs, g, steps=_gemm_steps(inputs, g))
    graphs = {}
    for name in plans:
        glu._dh_chunks = plan_of(name)
        graphs[name] = graph_steps(forward, inputs, g)["fwd+bwd"]
    ref = None
    for repeat in range(3):
        for name in (plans if repeat % 2 == 0 else plans[::-1]):
            glu._dh_chunks = plan_of(name)
            ms, peak, _ = measure(forward, "fwd+bwd", inputs, g)
            gms = median_ms(graphs[name])
            rows.append({"d": d, "N": n, "plan": name, "repeat": repeat, "ms": ms, "graph_ms": gms,
                         "peak_mib": peak, "floor_ms": floor_ms})
            print(f"{d:5d} {n:6d} {name:4s} plain {ms:7.3f} ({ms/floor_ms:5.3f}x) graph {gms:7.3f} ({gms/floor_ms:5.3f}x) {peak:6.0f} MiB", flush=True)
    # same gradients bits across plans?
    glu._dh_chunks = library_rule
    del graphs, inputs, g
    torch.cuda.empty_cache()
out = os.environ.get("OUT", ".")
with open(os.path.join(out, "chunks_ab.json"), "w") as f:
    json.dump({"env": environment(), "rows": rows}, f, indent=1)
