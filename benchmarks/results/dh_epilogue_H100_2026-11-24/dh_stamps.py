"""Timeline of the SwiGLU dh kernel's consumers (needs dh_epilogue_experiments.diff: EXPERIMENT 8
writes %globaltimer before and after each tile's main loop and after its epilogue, per program
and consumer). Per tile: the main loop's span from its turn (the later of its start and the
other consumer's previous main loop end), the epilogue, the wait at the next tile's top, and the
tensor cores' idle time between consecutive main loops. Writes $OUT/dh_stamps.json."""
import json, os, statistics, torch
import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us
base = dict(glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG)
glu_ops.GLU_DH_PINGPONG_MAX_K = 0
out = []
for tokens, d, hidden in ((16384, 4096, 14336), (16384, 2048, 5632)):
    dt = torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(tokens, d, device="cuda", dtype=dt)
    gy = torch.randn(tokens, d, device="cuda", dtype=dt)
    w_up, w_gate = (torch.randn(hidden, d, device="cuda", dtype=dt) / d**0.5 for _ in range(2))
    w_down = torch.randn(d, hidden, device="cuda", dtype=dt) / hidden**0.5
    h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dt)
    call = lambda: glu_ops.glu_backward_dh_impl(gy, x, w_up, w_gate, None, None, h, "silu", w_down, True)
    dbg = torch.zeros(132 * 2 * 64 * 4, dtype=torch.int64, device="cuda")
    glu_ops.DBG[0] = dbg
    r = {"shape": [tokens, d, hidden]}
    glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=0)
    r["E0_us"] = round(graph_us(call), 1)
    glu_ops.GLU_DH_WIDE_PINGPONG_CONFIG = dict(base, EXPERIMENT=8)
    r["E8_us"] = round(graph_us(call), 1)
    for _ in range(3):
        call()
    dbg.zero_(); torch.cuda.synchronize()
    call(); torch.cuda.synchronize()
    s = dbg.view(132, 2, 64, 4).cpu().tolist()
    t0 = min(v[0] for p in s for c in p for v in c if v[0] > 0)
    idle, mma, epi, top, total = [], [], [], [], []
    for p in range(132):
        tiles = []
        for c in range(2):
            for j, v in enumerate(s[p][c]):
                if v[0] > 0:
                    tiles.append((2 * j + c, v[0] - t0, v[1] - t0, v[2] - t0, c, j))
        tiles.sort()
        prev_end = None
        for k, (i, a, b, e, c, j) in enumerate(tiles):
            start = a if prev_end is None else max(a, prev_end)
            if prev_end is not None:
                idle.append(max(0, a - prev_end))
            mma.append(b - start)
            epi.append(e - b)
            nxt = s[p][c][j + 1][0] - t0 if j + 1 < 64 and s[p][c][j + 1][0] > 0 else None
            if nxt is not None:
                top.append(nxt - e)
            prev_end = b
        total.append(tiles[-1][3] - tiles[0][1])
    med = lambda v: round(statistics.median(v) / 1e3, 2)
    r.update(tiles_per_program=len(tiles), mma_us_median=med(mma), epilogue_us_median=med(epi),
             top_wait_us_median=med(top), idle_between_mainloops_us_median=med(idle),
             idle_total_us_mean=round(sum(idle) / 132 / 1e3, 1), span_us_median=med(total),
             mma_p90=round(sorted(mma)[int(0.9 * len(mma))] / 1e3, 2), epi_p90=round(sorted(epi)[int(0.9 * len(epi))] / 1e3, 2),
             idle_p90=round(sorted(idle)[int(0.9 * len(idle))] / 1e3, 2))
    print(json.dumps(r), flush=True)
    out.append(r)
    glu_ops.DBG[0] = None
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "dh_stamps.json"), "w"))
