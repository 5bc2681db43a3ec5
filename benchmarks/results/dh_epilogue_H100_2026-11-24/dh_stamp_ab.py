"""The stamped kernel (EXPERIMENT 8) against the library's (0), without h loads (1) and the main
loop alone (3), in CUDA graphs, at d = 4096, 2048, 1024 (needs dh_epilogue_experiments.diff)."""
import json, os, torch
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us
base = dict(glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG)
glu_ops.GLU_DH_PINGPONG_MAX_K = 0
out = []
for tokens, d, hidden in ((16384, 4096, 14336), (16384, 2048, 5632), (16384, 1024, 2816)):
    dt = torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(tokens, d, device="cuda", dtype=dt)
    gy = torch.randn(tokens, d, device="cuda", dtype=dt)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
    h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
    call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)
    glu_ops.DBG[0] = torch.zeros(132 * 2 * 64 * 4, dtype=torch.int64, device="cuda")
    r = {"shape": [tokens, d, hidden]}
    for rnd in range(1):
        r.setdefault("cublas_g", []).append(round(graph_us(lambda: gy @ w_down), 1))
        for e in (0, 8, 1, 3):
            glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=e)
            r.setdefault(f"E{e}", []).append(round(graph_us(call), 1))
    print(json.dumps(r), flush=True)
    out.append(r)
    glu_ops.DBG[0] = None
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "dh_stamp_ab.json"), "w"))
