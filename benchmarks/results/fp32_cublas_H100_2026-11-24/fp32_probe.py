"""fp32 whole-MLP: per-config compile time (ptxas share) and kernel time, highest (ieee) and
high (tf32), against eager; DLRM bottom and top MLPs."""
import json, os, sys, time
import torch, triton
import torch.nn.functional as F
from fusedmlp.kernels import configs as C
from fusedmlp.ops import mlp as M

OUT = os.environ.get("OUT", ".")
LOG = os.environ["PTXAS_LOG"]
dt = torch.float32
torch.manual_seed(0)
STACKS = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("top", (367, 512, 256, 1), ("relu", "relu", "sigmoid"))]
ROWS = [2048, 65536]
res = []

def ptxas_total():
    if not os.path.exists(LOG):
        return 0.0, 0
    s, n = 0.0, 0
    for line in open(LOG):
        a, b, rc = line.split()
        s += float(b) - float(a); n += 1
    return s, n

def timed_first(fn):
    p0, n0 = ptxas_total()
    t0 = time.time(); out = fn(); torch.cuda.synchronize(); t1 = time.time()
    fn(); torch.cuda.synchronize(); t2 = time.time()
    p1, n1 = ptxas_total()
    return out, (t1 - t0) - (t2 - t1), p1 - p0, n1 - n0

def gt(fn):
    return C.graph_timing(fn, (0.5,))[0] * 1e3

def cfg(c):
    return f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_C']}w{c.num_warps}s{c.num_stages}"

def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()

for prec in sys.argv[1].split(","):
    torch.set_float32_matmul_precision(prec)
    for name, widths, acts in STACKS:
        L = len(widths) - 1
        ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
        bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
        plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX, 4)
        print(prec, name, plan.roles, flush=True)
        for m in ROWS:
            x = torch.randn(m, widths[0], device="cuda", dtype=dt)
            ref = x.double()
            for i in range(L):
                ref = F.linear(ref, ws[i].double(), bs[i].double())
                ref = torch.relu(ref) if acts[i] == "relu" else torch.sigmoid(ref)
            fwd = lambda: M._launch_forward(x, ws, bs, plan, True)  # noqa
            for c in C.MLP_FWD_CONFIGS:
                try:
                    with M._fwd_launcher.forcing(c):
                        out, comp, ptx, n = timed_first(fwd)
                        us = gt(fwd)
                except Exception as e:
                    print(prec, name, m, "fwd", cfg(c), "FAILED", type(e).__name__, str(e)[:200], flush=True)
                    continue
                err = rel(out[0], ref)
                res.append(dict(prec=prec, stack=name, m=m, kernel="fwd", config=cfg(c), compile_s=comp, ptxas_s=ptx, ptxas_calls=n, us=us, err=err))
                print(f"{prec:8s} {name:6s} {m:6d} fwd   {cfg(c):14s} compile {comp:6.2f}s ptxas {ptx:6.2f}s ({n})  {us:9.1f} us err {err:.1e}", flush=True)
            y, saved, padded = M._launch_forward(x, ws, bs, plan, True)
            gy = torch.randn_like(y)
            bwd = lambda: M._launch_backward(gy, x, ws, saved, y, plan, True, padded)  # noqa
            for c in C.MLP_DGRAD_CONFIGS:
                try:
                    with M._dgrad_launcher.forcing(c):
                        out, comp, ptx, n = timed_first(bwd)
                        us = gt(bwd)
                except Exception as e:
                    print(prec, name, m, "bwd", cfg(c), "FAILED", type(e).__name__, str(e)[:200], flush=True)
                    continue
                res.append(dict(prec=prec, stack=name, m=m, kernel="bwd", config=cfg(c), compile_s=comp, ptxas_s=ptx, ptxas_calls=n, us=us))
                print(f"{prec:8s} {name:6s} {m:6d} bwd   {cfg(c):14s} compile {comp:6.2f}s ptxas {ptx:6.2f}s ({n})  {us:9.1f} us (dgrad+wgrad)", flush=True)
            # eager
            xr = x.clone().requires_grad_(True)
            wr = [w.clone().requires_grad_(True) for w in ws]
            br = [b.clone().requires_grad_(True) for b in bs]
            def eager():
                h = xr
                for i in range(L):
                    h = F.linear(h, wr[i], br[i])
                    h = torch.relu(h) if acts[i] == "relu" else torch.sigmoid(h)
                return h
            with torch.no_grad():
                ef = gt(eager)
            def eager_step():
                h = eager(); h.backward(gy)
            es = gt(eager_step) if False else triton.testing.do_bench(eager_step) * 1e3
            res.append(dict(prec=prec, stack=name, m=m, kernel="eager", fwd_us=ef, fwdbwd_us=es))
            print(f"{prec:8s} {name:6s} {m:6d} eager fwd {ef:9.1f} us (graph, no grad)  fwd+bwd {es:9.1f} us (events)", flush=True)
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res),
                  open(f"{OUT}/fp32_probe.json", "w"), indent=1)
