"""Probe: GEGLU's store backward with the dh stream beside the dx GEMMs (row chunks, the stream
on a side stream of high or low priority, dx on the caller's, cuBLASLt's SM carveout for dx).
Part A (PART_A=1): a dx-shaped GEMM in CUDA graphs under each BLAS backend and carveout. Part
B: each step timed with do_bench (CUDA events, L2 flushed), every step starting with
h.copy_(h0) (the stream writes dh over h), the copy's time subtracted; dx, dW, db compared
with the library's backward."""
import json, os, sys, torch
from fusedmlp.bench.harness import graph_us, median_ms
from fusedmlp.ops.glu import _geglu_forward_impl, _backward, glu_backward_dh_impl, _halves
from fusedmlp.ops._common import cdiv

torch.manual_seed(0)
dev = "cuda"
out_rows = []
def log(**kw):
    print(json.dumps(kw), flush=True); out_rows.append(kw)

carve = torch._C._set_sm_carveout_experimental
# A: does cuBLAS honour the carveout?
d, n = 1024, 32768
dh = torch.randn(n, 8 * d, device=dev, dtype=torch.bfloat16)
W = torch.randn(8 * d, d, device=dev, dtype=torch.bfloat16)
dx = torch.empty(n, d, device=dev, dtype=torch.bfloat16)
for backend in (("cublas", "cublaslt") if os.environ.get("PART_A") else ()):
    torch.backends.cuda.preferred_blas_library(backend)
    for k in (None, 16, 66):
        carve(k)
        log(part="A", backend=backend, carveout=k, us=round(graph_us(lambda: torch.mm(dh, W, out=dx)), 1))
    carve(None)
torch.backends.cuda.preferred_blas_library("cublas")
del dh, W, dx

act = "gelu_tanh"
side_hi = torch.cuda.Stream(priority=-(2**16))
side_lo = torch.cuda.Stream(priority=0)
for d, n in ((1024, 32768), (2048, 16384), (4096, 8192)):
    x = torch.randn(n, d, device=dev, dtype=torch.bfloat16)
    weight = torch.randn(8 * d, d, device=dev, dtype=torch.bfloat16) / d**0.5
    bias = torch.randn(8 * d, device=dev, dtype=torch.bfloat16)
    g = torch.randn(n, 4 * d, device=dev, dtype=torch.bfloat16)
    y, h0 = _geglu_forward_impl(x, weight, bias, act, True)
    h = h0.clone()
    out = 4 * d
    w1, w2 = _halves(weight, out)
    b1, b2 = _halves(bias, out)
    res = {}

    def base():
        h.copy_(h0)
        res["base"] = _backward(g, x, weight, bias, h, act, (True, True, True), False, in_place=True)

    def proto(chunks, k, side):
        main = torch.cuda.current_stream()
        rows = cdiv(cdiv(n, chunks), 128) * 128
        ranges = [(s, min(s + rows, n)) for s in range(0, n, rows)]
        def step():
            h.copy_(h0)
            grad_x = torch.empty_like(x)
            dbs = [None] * len(ranges)
            done = [torch.cuda.Event() for _ in ranges]
            side.wait_stream(main)
            with torch.cuda.stream(side):
                for i, (s, e) in enumerate(ranges):
                    _, dbs[i], _ = glu_backward_dh_impl(g[s:e], x[s:e], w1, w2, b1, b2, h[s:e], act, in_place=True)
                    done[i].record(side)
            carve(k)
            for i, (s, e) in enumerate(ranges):
                main.wait_event(done[i])
                torch.mm(h[s:e], weight, out=grad_x[s:e])
            carve(None)
            grad_w = h.t() @ x
            db = dbs[0]
            for part in dbs[1:]:
                db = db + part
            res["proto"] = (grad_x, grad_w, db.to(x.dtype))
        return step

    copy_us = 1e3 * median_ms(lambda: h.copy_(h0))
    base_us = 1e3 * median_ms(base) - copy_us
    log(part="B", d=d, n=n, variant="library", us=round(base_us, 1), copy_us=round(copy_us, 1))
    for chunks in (4, 8, 16):
        for k in (None, 8, 16, 24):
            for name, side in (("side_hi", side_hi), ("side_lo", side_lo)):
                step = proto(chunks, k, side)
                torch.backends.cuda.preferred_blas_library("cublaslt" if k else "cublas")
                us = 1e3 * median_ms(step) - copy_us
                torch.backends.cuda.preferred_blas_library("cublas")
                step(); base(); torch.cuda.synchronize()
                diffs = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(res["proto"], res["base"])]
                log(part="B", d=d, n=n, variant=f"chunks{chunks}_carve{k}_{name}", us=round(us, 1),
                    ratio=round(us / base_us, 3), reldiff=[f"{v:.1e}" for v in diffs])
    del x, weight, bias, g, y, h0, h
    torch.cuda.empty_cache()
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(out_rows, open(os.path.join(os.environ.get("OUT", "."), "overlap_probe.json"), "w"), indent=1)
