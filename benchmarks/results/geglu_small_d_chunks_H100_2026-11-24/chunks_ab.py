"""GEGLU recompute fwd+bwd at small d: one dh piece vs 2 column / 2 row chunks; plain and graphed, peak."""
import json, os, sys
import torch, triton
import fusedmlp.ops.glu as glu
from fusedmlp.bench.harness import environment, measure, graph_steps, median_ms, peak_mib_above_current
from fusedmlp.bench.suites.glu import _gemm_steps, _make_inputs

shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
plans = sys.argv[2].split(",")
library_rule = glu._dh_chunks

def plan_of(name):
    if name == "lib":
        return library_rule
    by_columns, count = name[0] == "c", int(name[1:])
    def chunks(m, out, row_bytes, columns_allowed):
        if by_columns and columns_allowed:
            return True, glu.column_ranges(out, count)
        rows = triton.cdiv(triton.cdiv(m, count), 128) * 128
        return False, [(start, min(start + rows, m)) for start in range(0, m, rows)]
    return chunks

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
