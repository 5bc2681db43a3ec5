"""Host us per call (no sync), fp32 "highest", DLRM bottom/top at 2048 rows: mlp() (one
Function), the bare Function apply, eager; fwd and fwd+bwd; 3 interleaved rounds."""
import torch, torch.nn.functional as F
import fusedmlp
from fusedmlp.bench.harness import host_us_per_call
from fusedmlp.ops.mlp import _CublasStackFunction

torch.set_float32_matmul_precision("highest")
for name, sizes in (("bottom", (13, 512, 256, 64, 16)), ("top", (367, 512, 256, 1))):
    L = len(sizes) - 1
    last = "sigmoid" if sizes[-1] == 1 else "relu"
    acts = ("relu",) * (L - 1) + (last,)
    ws = [(torch.randn(sizes[i + 1], sizes[i], device="cuda") / sizes[i] ** 0.5).requires_grad_() for i in range(L)]
    bs = [(torch.randn(sizes[i + 1], device="cuda") * 0.1).requires_grad_() for i in range(L)]
    params = [t for p in zip(ws, bs) for t in p]
    x = torch.randn(2048, sizes[0], device="cuda", requires_grad=True)
    g = torch.randn(2048, sizes[-1], device="cuda")

    def eager():
        h = x
        for i in range(L):
            h = F.linear(h, ws[i], bs[i])
            h = torch.sigmoid(h) if acts[i] == "sigmoid" else torch.relu(h)
        return h

    impls = {"mlp": lambda: fusedmlp.mlp(x, ws, bs, "relu", last), "apply": lambda: _CublasStackFunction.apply(x, acts, False, *params),
             "eager": eager}
    res = {k: [] for k in impls}
    for _ in range(3):
        for k, fn in impls.items():
            res[k].append((host_us_per_call(fn), host_us_per_call(lambda: torch.autograd.grad(fn(), [x] + params, g))))
    for k, v in res.items():
        print(name, k, "fwd", sorted(a for a, _ in v)[1], "us; fwd+bwd", sorted(b for _, b in v)[1], "us", flush=True)
