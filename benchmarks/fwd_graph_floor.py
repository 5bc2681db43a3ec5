"""Forward kernel time of linear_act and GEGLU against the bare cuBLAS GEMM, in CUDA graphs
(kernel time only, no host time), for the fusedmlp on PYTHONPATH.

    python benchmarks/fwd_graph_floor.py TAG        (writes $OUT/fwd_TAG.json; OUT defaults to .)

linear_act runs with the ping-pong kernel and with the Triton TMA kernel (ops/_common.PINGPONG)
where the tree has both; GEGLU ("fused") runs whatever its op dispatches to (the Triton kernel
before commit bcfd588, the ping-pong kernel from it on; earlier JSONs call that column "triton"). Two trees side by side in one call: run it once per tree with
PYTHONPATH pointing at each.
"""
import json, os, sys, time
import torch, triton
import fusedmlp
import fusedmlp.ops._common as common
from fusedmlp.ops.linear_act import linear_act_forward_impl
tag = sys.argv[1]
torch.manual_seed(0)
rows = []
def t(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=300) * 1e3
for M, K, N, act in [(16384, 512, 1792, "gelu_tanh"), (16384, 512, 1792, "silu"), (16384, 4096, 14336, "gelu_tanh"),
                     (8192, 1024, 4096, "gelu_tanh"), (32768, 4096, 4096, "identity")]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    r = dict(op="linear_act", shape=[M, K, N], act=act, cublas=t(lambda: x @ w.T))
    for pp in ([True, False] if hasattr(common, "PINGPONG") else [False]):
        if hasattr(common, "PINGPONG"):
            common.PINGPONG = pp
        r["pingpong" if pp else "triton"] = t(lambda: linear_act_forward_impl(x, w, b, act, False))
    rows.append(r)
for N, d in [(8192, 1024), (32768, 1024), (16384, 2048), (8192, 4096)]:
    x = torch.randn(N, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8 * d, d, device="cuda", dtype=torch.bfloat16) / d ** 0.5
    b = torch.randn(8 * d, device="cuda", dtype=torch.bfloat16)
    rows.append(dict(op="geglu", shape=[N, d], cublas=t(lambda: x @ w.T),
                     fused=t(lambda: fusedmlp.geglu(x, w, b, recompute=True))))
for r in rows:
    print(tag, json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}))
json.dump(dict(tag=tag, device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), command=" ".join(["python"] + sys.argv),
               rows=rows), open(os.path.join(os.environ.get("OUT", "."), f"fwd_{tag}.json"), "w"), indent=1)
