"""Forward-kernel sweep at small batches: per config kernel time (CUDA graph) + PTX facts."""
import json, os, re, sys, itertools
import torch, triton
from triton.testing import do_bench_cudagraph
import torch.nn.functional as F
from fusedmlp.ops import mlp as M
from fusedmlp.kernels.mlp import mlp_fwd_kernel

torch.manual_seed(0)
dt = torch.bfloat16
OUT = os.environ.get("OUT", ".")
res = []

def compiled_set():
    s = {}
    for dev, entry in mlp_fwd_kernel.device_caches.items():
        cache = entry[0]
        for k, v in cache.items():
            s[id(v)] = v
    return s

def ptx_facts(ck):
    ptx = ck.asm.get("ptx", "")
    return dict(cp_async=len(re.findall(r"cp\.async\.(?:ca|cg)", ptx)), ldg=len(re.findall(r"ld\.global", ptx)),
                wgmma=len(re.findall(r"wgmma\.mma_async", ptx)), mma=len(re.findall(r"mma\.sync", ptx)),
                bar=len(re.findall(r"bar\.sync", ptx)), regs=getattr(ck, "n_regs", None), spills=getattr(ck, "n_spills", None),
                smem=ck.metadata.shared)

def ones():
    k = torch.empty(1, device="cuda")
    return lambda: k.add_(1)

print("graph floor (1 tiny kernel)", do_bench_cudagraph(ones(), rep=200) * 1e3, flush=True)
stacks = [("bottom", (13, 512, 256, 64, 16), ("relu",) * 4), ("top_rest", (512, 256, 1), ("relu", "sigmoid")),
          ("top368", (368, 512, 256, 1), ("relu", "relu", "sigmoid"))]
tiles = []
for bm, bc, w, st in itertools.product((16, 32), (32, 64, 128), (2, 4, 8), (1, 2, 3)):
    tiles.append(triton.Config({"BLOCK_M": bm, "BLOCK_C": bc}, num_warps=w, num_stages=st))
tiles += [triton.Config({"BLOCK_M": 64, "BLOCK_C": bc}, num_warps=4, num_stages=st) for bc in (32, 64) for st in (1, 2)]
only = sys.argv[1:]  # optional stack names
for name, widths, acts in stacks:
    if only and name not in only:
        continue
    L = len(widths) - 1
    ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(L)]
    bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(L)]
    plan = M.mlp_plan(widths, acts, (True,) * L, M.FULL_MAX)
    for m in (2048, 8192):
        x = torch.randn(m, widths[0], device="cuda", dtype=dt)
        ref = x.float()
        for w, b, a in zip(ws, bs, acts):
            ref = F.linear(ref, w.float(), b.float())
            ref = torch.relu(ref) if a == "relu" else torch.sigmoid(ref)
        def eager():
            h = x
            for w, b, a in zip(ws, bs, acts):
                h = F.linear(h, w, b)
                h = torch.relu(h) if a == "relu" else torch.sigmoid(h)
            return h
        e = do_bench_cudagraph(eager, rep=200) * 1e3
        res.append(dict(stack=name, m=m, impl="eager_graph", us=e))
        for save in (True,):
            modes = plan.save if save else ("none",) * L
            best = None
            for cfg in tiles:
                meta = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
                before = compiled_set()
                try:
                    with M._fwd_launcher.forcing(cfg):
                        y = M._launch_stack(x, ws, bs, plan, modes)[0]
                        torch.cuda.synchronize()
                        us = do_bench_cudagraph(lambda: M._launch_stack(x, ws, bs, plan, modes), rep=100) * 1e3
                except Exception as ex:
                    print(f"{name} {m} {meta} failed {type(ex).__name__}: {str(ex)[:80]}", flush=True)
                    continue
                new = [v for k, v in compiled_set().items() if k not in before]
                facts = ptx_facts(new[0]) if new else {}
                err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                r = dict(stack=name, m=m, save=save, config=meta, us=us, err=err, **facts)
                res.append(r)
                if best is None or us < best["us"]:
                    best = r
                print(f"{name:8s} {m:5d} save={int(save)} BM{meta['BLOCK_M']:3d} BC{meta['BLOCK_C']:3d} w{meta['num_warps']} s{meta['num_stages']} "
                      f"{us:7.2f} us err {err:.1e} {facts}", flush=True)
            print(f"BEST {name} {m} save={save}: {best['config']} {best['us']:.2f} us (eager graph {e:.2f})", flush=True)
        with open(f"{OUT}/fwd_small.json", "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), results=res), f, indent=1)
