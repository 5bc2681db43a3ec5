"""Captured fwd+bwd steps with the dgrad consumer's saved chunk loaded ahead or in turn (one process, interleaved)."""
import json, os
import torch, triton
from triton.testing import do_bench
import fusedmlp
from fusedmlp.ops import mlp as M

torch.manual_seed(0)
dt = torch.bfloat16
OUT = os.environ.get("OUT", ".")
stacks = [("bottom", (13, 512, 256, 64, 16), "relu", None), ("top", (367, 512, 256, 1), "relu", "sigmoid"),
          ("h_stream", (32, 64, 512, 64, 16), "relu", None)]
res = []
for name, widths, act, last in stacks:
    L = len(widths) - 1
    ws = [(torch.randn(widths[i + 1], widths[i], device="cuda") / widths[i] ** 0.5).to(dt).requires_grad_() for i in range(L)]
    bs = [(torch.randn(widths[i + 1], device="cuda") * 0.1).to(dt).requires_grad_() for i in range(L)]
    for m in (2048, 8192, 16384, 65536):
        x = torch.randn(m, widths[0], device="cuda", dtype=dt, requires_grad=True)
        g = torch.randn(m, widths[-1], device="cuda", dtype=dt)
        out = {}
        graphs = {}
        for on in (False, True):
            M.DGRAD_LOADS_AHEAD_MAX_ROWS = 1 << 30 if on else 0
            def step():
                y = fusedmlp.mlp(x, ws, bs, act, last)
                return torch.autograd.grad(y, [x] + ws + bs, g)
            graphs[on] = fusedmlp.capture_cuda_graph(step, warmup=2)
        grads = {}
        for on in (False, True):
            graphs[on][0].replay(); torch.cuda.synchronize()
            grads[on] = [t.clone() for t in graphs[on][1]]
        same = all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))
        for rnd in range(3):
            for on in (False, True):
                us = do_bench(graphs[on][0].replay, rep=100) * 1e3
                out[on] = min(out.get(on, 1e9), us)
        r = dict(stack=name, m=m, off=out[False], on=out[True], same_bits=same)
        res.append(r)
        print(f"{name:8s} {m:6d} in turn {out[False]:8.2f} ahead {out[True]:8.2f} us  ahead/in turn {out[True]/out[False]:.3f} same bits {same}", flush=True)
with open(f"{OUT}/mlp_dgrad_ahead.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res), f, indent=1)
