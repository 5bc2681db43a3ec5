import sys, torch, fusedmlp
import fusedmlp.kernels.configs as configs
import fusedmlp.ops.mlp as mlp_ops
from fusedmlp.kernels.mlp import mlp_fwd_kernel
from cuda.bindings import runtime as cudart

configs.AUTOTUNE = True
fresh = configs.Launcher(mlp_fwd_kernel, configs.MLP_FWD_CONFIGS[:2], key=mlp_ops._fwd_launcher.key, timing="events")
mlp_ops._fwd_launcher = fresh
sizes = (13, 64, 8)
ws = [(torch.randn(o, i, device="cuda") / i**0.5).to(torch.bfloat16) for i, o in zip(sizes, sizes[1:])]
bs = [torch.randn(o, device="cuda").to(torch.bfloat16) for o in sizes[1:]]
x = torch.randn(500, sizes[0], device="cuda", dtype=torch.bfloat16)
stream_holder = {}
last_ok = ["start"]
def status():
    s = torch.cuda.current_stream().cuda_stream
    err, st = cudart.cudaStreamIsCapturing(s)
    return int(st)
calls = []
def tracer(frame, event, arg):
    if event == "return":
        f = frame.f_code.co_filename
        if "triton" in f or "fusedmlp" in f or "torch/cuda" in f:
            st = status()
            calls.append((st, f.split("site-packages/")[-1].split("/src/")[-1], frame.f_code.co_name, frame.f_lineno))
            if st != 1 and "first_bad" not in stream_holder:
                stream_holder["first_bad"] = calls[-1]
    return tracer
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        sys.settrace(tracer)
        try:
            fusedmlp.mlp(x, ws, bs, "relu", None)
        finally:
            sys.settrace(None)
except Exception as e:
    print("raised:", type(e).__name__, str(e)[:200])
print("first bad:", stream_holder.get("first_bad"))
bad = stream_holder.get("first_bad")
if bad:
    i = calls.index(bad)
    for c in calls[max(0, i - 25): i + 2]:
        print(c)
print("calls", len(calls))
