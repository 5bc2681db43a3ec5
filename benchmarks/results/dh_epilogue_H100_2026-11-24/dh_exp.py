"""Variants of the SwiGLU store-mode dh kernel (glu_bwd_dh_wide_pingpong_kernel) timed in CUDA
graphs against cuBLAS's g = gy @ Wd alone, 16384 tokens, d = 4096 and 2048. Needs
dh_epilogue_experiments.diff applied to the tree (the EXPERIMENT switch of the wide consumer).

    python dh_exp.py E[:STAGES] ...        e.g.  python dh_exp.py 0 1 2 3 4   /   0 3 5 6   /   0 4 7 7:5

E0 the library's kernel; E1 no h loads; E2 no stores; E3 the main loop and g stored only;
E4 no z store; E5 / E6 h read and dh, z written with pointer loads and stores in the
accumulator's layout (E5 with evict_first hints); E7 two epilogue buffers per consumer, z not
stored (so 5 stages fit). Variants 5-7 are first checked bit for bit against E0 (dh, and z
where both store it). Two rounds; writes $OUT/dh_exp.json.
"""
import json, os, sys, torch
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us

variants = [(int(v.split(":")[0]), int(v.split(":")[1]) if ":" in v else 4) for v in (sys.argv[1:] or ["0", "3"])]
base = dict(glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG)
glu_ops.GLU_DH_PINGPONG_MAX_K = 0
rows = []
for tokens, d, hidden in ((16384, 4096, 14336), (16384, 2048, 5632)):
    dt = torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(tokens, d, device="cuda", dtype=dt)
    gy = torch.randn(tokens, d, device="cuda", dtype=dt)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
    h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
    call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)  # noqa: E731
    r = {"shape": [tokens, d, hidden]}
    glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=0)
    ref_dh, _, ref_z = (t.clone() for t in call())
    for e, st in variants:
        if e >= 5:
            glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=e, STAGES=st)
            dh, _, z = call()
            r[f"E{e}s{st}_same"] = torch.equal(dh, ref_dh) and (e == 7 or torch.equal(z, ref_z))
    for _ in range(2):
        r.setdefault("cublas_g", []).append(round(graph_us(lambda: gy @ w_down), 1))
        for e, st in variants:
            glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=e, STAGES=st)
            r.setdefault(f"E{e}s{st}", []).append(round(graph_us(call), 1))
    glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = base
    print(json.dumps(r), flush=True)
    rows.append(r)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "dh_exp.json"), "w"))
