"""GEGLU store backward: the dh stream on k SMs beside a persistent dx GEMM (ours) on the other 132 - k.

Rows in C chunks: the stream kernels on a low-priority side stream back to back, each chunk's dx
(the library's linear ping-pong kernel, identity, grid = 132 - k programs) on a high-priority
stream after its chunk's stream. Baselines: stream(all) then cuBLAS dx (the library's path), and
stream(all) then our GEMM on all SMs. dW is the same in every variant and left out.
"""
import json
import os
import sys

import torch
from triton.testing import do_bench

from fusedmlp.ops import _common
from fusedmlp.ops import glu as glu_ops
from fusedmlp.ops import linear_act as la

torch.manual_seed(0)
dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
res = {"device": torch.cuda.get_device_name(), "sms": SMS, "runs": []}
SHAPES = [(1024, 32768), (2048, 16384)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]]


def our_gemm(a, wt, y, sms, form):
    la.num_sms = lambda t: sms
    m, k = a.shape
    n = wt.shape[0]
    common = dict(M=m, N=n, K=k, M_KEY=_common.autotune_m_key(m), ACT="identity", HAS_BIAS=False, STORE_PRE=False)
    la._launch_fwd_pingpong(a, wt, y, y, y, common, form)


for d, n_rows in SHAPES:
    out = 4 * d
    x = torch.randn(n_rows, d, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(8 * d, d, device=dev) / d ** 0.5).to(torch.bfloat16)
    wt = w.t().contiguous()
    g = torch.randn(n_rows, out, device=dev, dtype=torch.bfloat16)
    h = torch.randn(n_rows, 8 * d, device=dev, dtype=torch.bfloat16)
    dh = torch.empty_like(h)
    dx = torch.empty(n_rows, d, device=dev, dtype=torch.bfloat16)
    w1, w2 = w[:out], w[out:]

    def stream(rows):
        glu_ops._launch_bwd_dh(g[rows], x[rows], w1, w2, None, None, h[rows], "gelu_tanh", None, False, dh=dh[rows])

    everything = slice(0, n_rows)

    def base_cublas():
        stream(everything)
        torch.mm(dh, w, out=dx)

    forms = {}
    for form in ("alternating", "cooperative", "wide"):
        forms[form] = do_bench(lambda: our_gemm(dh, wt, dx, SMS, form))
    best_form = min(forms, key=forms.get)
    t = dict(d=d, n=n_rows, our_gemm_forms_ms=forms, best_form=best_form,
             stream_ms=do_bench(lambda: stream(everything)),
             cublas_dx_ms=do_bench(lambda: torch.mm(dh, w, out=dx)),
             base_cublas_ms=do_bench(base_cublas))
    ref = dx.float().clone()
    our_gemm(dh, wt, dx, SMS, best_form)
    t["our_vs_cublas_max_rel"] = ((dx.float() - ref).abs().max() / ref.abs().max()).item()
    ours_full = dx.clone()

    hi = torch.cuda.Stream(priority=-1)
    lo = torch.cuda.Stream(priority=0)
    for sms_off in (0, 8, 16, 24, 32, 48):
        t[f"our_gemm_{SMS - sms_off}sms_ms"] = do_bench(lambda: our_gemm(dh, wt, dx, SMS - sms_off, best_form))
    for chunks in (4, 8):
        bounds = [n_rows * i // chunks for i in range(chunks + 1)]
        rows = [slice(bounds[i], bounds[i + 1]) for i in range(chunks)]
        for sms_off in (0, 8, 16, 24, 32, 48):
            def overlapped():
                main = torch.cuda.current_stream()
                lo.wait_stream(main)
                hi.wait_stream(main)
                done = []
                with torch.cuda.stream(lo):
                    for r in rows:
                        stream(r)
                        ev = torch.cuda.Event()
                        ev.record(lo)
                        done.append(ev)
                with torch.cuda.stream(hi):
                    for r, ev in zip(rows, done):
                        hi.wait_event(ev)
                        our_gemm(dh[r], wt, dx[r], SMS - sms_off, best_form)
                main.wait_stream(hi)
                main.wait_stream(lo)
            dx.zero_()
            overlapped()
            torch.cuda.synchronize()
            same = torch.equal(dx, ours_full)
            ms = do_bench(overlapped)
            t[f"overlap_c{chunks}_k{sms_off}_ms"] = ms
            t[f"overlap_c{chunks}_k{sms_off}_bitwise"] = same
            print(d, n_rows, chunks, sms_off, round(ms, 4), same, flush=True)
    res["runs"].append(t)
    print(json.dumps(t, indent=1), flush=True)

os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
with open(os.path.join(os.environ.get("OUT", "."), "overlap2.json"), "w") as f:
    json.dump(res, f, indent=1)
print("\n d     N   stream  cublas_dx  base(stream+cublas)  best overlap")
for t in res["runs"]:
    best = min((v, k) for k, v in t.items() if k.startswith("overlap") and k.endswith("_ms"))
    print(t["d"], t["n"], round(t["stream_ms"], 3), round(t["cublas_dx_ms"], 3), round(t["base_cublas_ms"], 3), best)
