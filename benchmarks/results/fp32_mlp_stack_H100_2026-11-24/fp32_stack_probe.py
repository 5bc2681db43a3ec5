"""fp32 at "highest": DLRM's MLPs as (a) fusedmlp.mlp today (one linear_act Function a layer),
(b) one autograd Function for the whole cuBLAS stack (the same forward and backward pieces:
linear_act._cublas_fwd, backward_formula), (c) eager; plain calls, median ms (do_bench)."""
import json, os
import torch, triton
import torch.nn.functional as F
import fusedmlp
from fusedmlp.ops.linear_act import _cublas_fwd, backward_formula
from fusedmlp.ops.activations import DERIVATIVE_FROM_OUTPUT

OUT = os.environ.get("OUT", ".")


class Stack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, acts, *params):
        ws, bs = params[0::2], params[1::2]
        h, inputs, saved, modes = x, [], [], []
        for w, b, a in zip(ws, bs, acts):
            store_pre = a not in DERIVATIVE_FROM_OUTPUT and a != "identity"
            y, pre = _cublas_fwd(h, w, b, a, store_pre)
            inputs.append(h)
            saved.append(pre if store_pre else (y if a != "identity" else None))
            modes.append("pre" if store_pre else "output")
            h = y
        ctx.acts, ctx.modes, ctx.layers = acts, modes, len(ws)
        ctx.save_for_backward(*inputs, *saved, *params)
        return h

    @staticmethod
    def backward(ctx, g):
        L = ctx.layers
        t = ctx.saved_tensors
        inputs, saved, params = t[:L], t[L:2 * L], t[2 * L:]
        ws, bs = params[0::2], params[1::2]
        grads = [None] * (2 * L)
        for i in reversed(range(L)):
            needs_x = i > 0 or ctx.needs_input_grad[0]
            dx, dw, db = backward_formula(g, inputs[i], ws[i], bs[i], saved[i], ctx.acts[i], ctx.modes[i],
                                          (needs_x, True, True), False)
            grads[2 * i], grads[2 * i + 1] = dw, db
            g = dx
        return (g, None, *grads)


torch.set_float32_matmul_precision("highest")
torch.manual_seed(0)
rows = []
for name, sizes in (("bottom", (13, 512, 256, 64, 16)), ("top", (367, 512, 256, 1))):
    L = len(sizes) - 1
    acts = tuple(["relu"] * (L - 1) + ["sigmoid" if sizes[-1] == 1 else "relu"])
    ws = [(torch.randn(sizes[i + 1], sizes[i], device="cuda") / sizes[i] ** 0.5).requires_grad_() for i in range(L)]
    bs = [(torch.randn(sizes[i + 1], device="cuda") * 0.1).requires_grad_() for i in range(L)]
    params = [t for pair in zip(ws, bs) for t in pair]
    for m in (2048, 8192, 65536):
        x = torch.randn(m, sizes[0], device="cuda", requires_grad=True)
        g = torch.randn(m, sizes[-1], device="cuda")

        def eager():
            h = x
            for i in range(L):
                h = F.linear(h, ws[i], bs[i])
                h = torch.sigmoid(h) if acts[i] == "sigmoid" else torch.relu(h)
            return h

        impls = {"fused": lambda: fusedmlp.mlp(x, ws, bs, "relu", acts[-1]),
                 "stack": lambda: Stack.apply(x, acts, *params), "eager": eager}
        ref = None
        row = dict(stack=name, m=m)
        for impl, fn in impls.items():
            y = fn()
            grads = torch.autograd.grad(y, [x] + params, g)
            if ref is None:
                ref = (y.detach(), [t.detach() for t in grads])
            else:
                row[f"{impl}_maxdiff"] = max([(y - ref[0]).abs().max().item()] +
                                             [(a - b).abs().max().item() for a, b in zip(grads, ref[1])])
            del y, grads
            row[f"{impl}_fwd"] = triton.testing.do_bench(fn)
            row[f"{impl}_fwdbwd"] = triton.testing.do_bench(lambda: torch.autograd.grad(fn(), [x] + params, g))
        rows.append(row)
        print(f"{name:6s} {m:6d} fwd fused {row['fused_fwd']:.3f} stack {row['stack_fwd']:.3f} eager {row['eager_fwd']:.3f}"
              f" | fwd+bwd fused {row['fused_fwdbwd']:.3f} stack {row['stack_fwdbwd']:.3f} eager {row['eager_fwdbwd']:.3f}"
              f" | maxdiff stack {row['stack_maxdiff']:.1e} eager {row['eager_maxdiff']:.1e}", flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(f"{OUT}/fp32_stack.json", "w"), indent=1)
