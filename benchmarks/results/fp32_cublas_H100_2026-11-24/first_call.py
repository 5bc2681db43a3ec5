"""First-call time (compile + tune + run) of fusedmlp.mlp fwd+bwd with a fresh Triton cache:
fp32 at highest / high, bf16; DLRM bottom and top at 8192 rows."""
import os, sys, time, json
import torch
import fusedmlp
prec, dt = sys.argv[1], {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[2]]
torch.set_float32_matmul_precision(prec)
res = {}
for name, sizes, last in (("bottom", (13, 512, 256, 64, 16), "relu"), ("top", (367, 512, 256, 1), "sigmoid")):
    ws = [(torch.randn(o, i, device="cuda") / i ** 0.5).to(dt).requires_grad_() for i, o in zip(sizes, sizes[1:])]
    bs = [torch.zeros(o, device="cuda", dtype=dt, requires_grad=True) for o in sizes[1:]]
    x = torch.randn(8192, sizes[0], device="cuda", dtype=dt)
    times = []
    for _ in range(2):
        torch.cuda.synchronize(); t0 = time.time()
        y = fusedmlp.mlp(x, ws, bs, "relu", last)
        torch.cuda.synchronize(); t1 = time.time()
        y.sum().backward()
        torch.cuda.synchronize(); t2 = time.time()
        times.append((t1 - t0, t2 - t1))
    res[name] = times
    print(f"{prec:8s} {sys.argv[2]} {name:6s} first fwd {times[0][0]:7.2f} s bwd {times[0][1]:7.2f} s | second {times[1][0]*1e3:7.2f} ms {times[1][1]*1e3:7.2f} ms", flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"first_call_{prec}_{sys.argv[2]}.json"), "w"))
