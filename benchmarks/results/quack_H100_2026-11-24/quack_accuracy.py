import time, json, os, sys
import torch
t0 = time.time()
import quack, quack.mlp, quack.linear
print("quack", quack.__version__, "import s", round(time.time() - t0, 1), flush=True)
from fusedmlp.bench import quack as qpeer
from fusedmlp.ops.swiglu import swiglu_reference
from fusedmlp.ops.glu import geglu_reference
from fusedmlp.ops.linear_act import linear_act_reference
torch.manual_seed(0)
err = lambda a, r: ((a.double() - r).norm() / r.norm()).item()
dev, dt = "cuda", torch.bfloat16
res = {}
# swiglu, both modes
tok, d, h = 2048, 512, 1792
x64 = torch.randn(tok, d, dtype=torch.float64, device=dev)
ws64 = [torch.randn(o, i, dtype=torch.float64, device=dev) / i**0.5 for o, i in ((h, d), (h, d), (d, h))]
g64 = torch.randn(tok, d, dtype=torch.float64, device=dev)
x64, *ws64 = [t.to(dt).double() for t in (x64, *ws64)]
ref = [t.clone().requires_grad_() for t in (x64, *ws64)]
yr = swiglu_reference(*ref); yr.backward(g64)
for rec in (False, True):
    leaves = [t.to(dt).requires_grad_() for t in (x64, *ws64)]
    fwd = qpeer.swiglu_forward(rec)
    inp = fwd.adapt_inputs(tuple(leaves))
    t1 = time.time()
    y = fwd(*inp); y.backward(g64.to(dt)); torch.cuda.synchronize()
    wgu = inp[1].grad
    res[f"swiglu rec={rec}"] = dict(first_s=round(time.time() - t1, 1), y=err(y, yr), dx=err(inp[0].grad, ref[0].grad),
        dwg=err(wgu[0::2], ref[1].grad), dwu=err(wgu[1::2], ref[2].grad), dwd=err(inp[2].grad, ref[3].grad))
    print(res[f"swiglu rec={rec}"], flush=True)
# geglu fwd
n, d = 2048, 256
x = torch.randn(n, d, device=dev).to(dt); w = (torch.randn(8 * d, d, device=dev) / d**0.5).to(dt); b = torch.randn(8 * d, device=dev).to(dt)
fwd = qpeer.geglu_forward(); inp = fwd.adapt_inputs((x, w, b))
t1 = time.time(); y = fwd(*inp); torch.cuda.synchronize()
res["geglu"] = dict(first_s=round(time.time() - t1, 1), y=err(y, geglu_reference(x.double(), w.double(), b.double())), shape=list(y.shape))
print(res["geglu"], flush=True)
# linear_act fwd, several activations
x = torch.randn(2048, 512, device=dev).to(dt); w = (torch.randn(1792, 512, device=dev) / 512**0.5).to(dt); b = torch.randn(1792, device=dev).to(dt)
for act in ("gelu_tanh", "relu", "silu", "squared_relu", "identity"):
    fwd = qpeer.linear_act_forward(act)
    t1 = time.time(); y = fwd(x, w, b); torch.cuda.synchronize()
    res[f"linear {act}"] = dict(first_s=round(time.time() - t1, 1), y=err(y, linear_act_reference(x.double(), w.double(), b.double(), act)))
    print(act, res[f"linear {act}"], flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "quack_smoke.json"), "w"), indent=1)
