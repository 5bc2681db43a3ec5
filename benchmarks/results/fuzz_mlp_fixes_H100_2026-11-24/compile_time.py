"""First-call (compile) time of the whole-MLP kernels, per kernel, fp32 against bf16, fresh Triton cache."""
import os, time, json
os.environ["FUSEDMLP_AUTOTUNE"] = "0"
import torch
import fusedmlp
rows = []
for sizes, dtype in [((113, 217, 168, 8, 16), torch.float32), ((113, 217, 168, 8, 16), torch.bfloat16),
                     ((13, 512, 256, 64, 16), torch.float32), ((13, 512, 256, 64, 16), torch.bfloat16)]:
    x = torch.randn(7, sizes[0], device="cuda", dtype=dtype, requires_grad=True)
    ws = [torch.randn(o, i, device="cuda", dtype=dtype, requires_grad=True) for i, o in zip(sizes, sizes[1:])]
    bs = [torch.randn(o, device="cuda", dtype=dtype, requires_grad=True) for o in sizes[1:]]
    t = {}
    for phase in ("forward", "backward", "again"):
        torch.cuda.synchronize(); t0 = time.time()
        y = fusedmlp.mlp(x, ws, bs, "sigmoid", "sigmoid")
        torch.cuda.synchronize(); t1 = time.time()
        y.sum().backward()
        torch.cuda.synchronize(); t2 = time.time()
        if phase == "forward":
            t["forward_s"], t["backward_s"] = t1 - t0, t2 - t1
        elif phase == "again":
            t["warm_step_s"] = t2 - t0
    rows.append(dict(sizes=sizes, dtype=str(dtype), **t))
    print(f"{'-'.join(map(str, sizes))} {dtype}: first forward {t['forward_s']:.1f} s, first backward {t['backward_s']:.1f} s, warm step {t['warm_step_s']*1e3:.2f} ms", flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "compile_time.json"), "w"), indent=1)
