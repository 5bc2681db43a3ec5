"""What torch.autocast costs the fused ops: GPU time (CUDA-graph replays) of a forward and a
training step with fp32 master weights under autocast (bf16): the library's casts (tensors up
to GROUPED_CAST_MAX_NUMEL elements in one multi-tensor copy, larger ones a kernel each), every
cast in one multi-tensor copy, and a kernel per tensor (as autocast casts eager layers);
against the same op on weights already in bf16 and eager PyTorch under autocast (its weight
cache off, as a graph capture needs) and on bf16 weights.

    python benchmarks/autocast_casts.py [--out FILE.json]

Workloads: DLRM's bottom and top MLPs (fusedmlp.mlp) at 2048 and 65536 rows, linear_act at
16384 x 512 -> 1792 (gelu_tanh). x comes in bf16 (the output of an earlier autocast layer).
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import fusedmlp
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import environment, median_ms
from fusedmlp.ops import _common


def _mlp_case(sizes, rows):
    last = "sigmoid" if sizes[-1] == 1 else "relu"
    weights = [(torch.randn(o, i, device="cuda") / i**0.5).requires_grad_() for i, o in zip(sizes, sizes[1:])]
    biases = [(torch.randn(o, device="cuda") * 0.1).requires_grad_() for o in sizes[1:]]
    x = torch.randn(rows, sizes[0], device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def fused(ws, bs):
        return fusedmlp.mlp(x, ws, bs, "relu", last)

    def eager(ws, bs):
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = F.linear(h, w, b)
            h = torch.sigmoid(h) if i == len(ws) - 1 and last == "sigmoid" else torch.relu(h)
        return h

    return f"mlp {'-'.join(map(str, sizes))} x {rows}", (weights, biases), fused, eager, x


def _linear_case(rows, d_in, d_out):
    w = (torch.randn(d_out, d_in, device="cuda") / d_in**0.5).requires_grad_()
    b = torch.randn(d_out, device="cuda").requires_grad_()
    x = torch.randn(rows, d_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    return (f"linear_act {rows} x {d_in} -> {d_out}", ([w], [b]),
            lambda ws, bs: fusedmlp.linear_act(x, ws[0], bs[0], "gelu_tanh"),
            lambda ws, bs: F.gelu(F.linear(x, ws[0], bs[0]), approximate="tanh"), x)


def _timed(call, params, x, mode, autocast):
    """Median us of a CUDA-graph replay of the forward (or forward + backward) of ``call``."""
    leaves = [x] + params
    g = None

    def step():
        nonlocal g
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            y = call()
        if mode == "fwd":
            return y
        if g is None:
            g = torch.randn_like(y)
        return torch.autograd.grad(y, leaves, g)

    graph, _ = capture_cuda_graph(step)
    return median_ms(graph.replay) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    cases = [_mlp_case((13, 512, 256, 64, 16), 2048), _mlp_case((367, 512, 256, 1), 2048),
             _mlp_case((13, 512, 256, 64, 16), 65536), _mlp_case((367, 512, 256, 1), 65536),
             _linear_case(16384, 512, 1792)]
    rule = _common.GROUPED_CAST_MAX_NUMEL
    rows = []
    for name, (weights, biases), fused, eager, x in cases:
        low = ([w.detach().bfloat16().requires_grad_() for w in weights],
               [b.detach().bfloat16().requires_grad_() for b in biases])
        for mode in ("fwd", "fwd+bwd"):
            row = {"case": name, "mode": mode}
            row["fused_bf16_weights"] = _timed(lambda: fused(*low), low[0] + low[1], x, mode, False)
            # the library's rule, then every cast in one multi-tensor copy, then a kernel per tensor
            for label, limit in (("library", rule), ("grouped", 1 << 62), ("per_tensor", 0)):
                _common.GROUPED_CAST_MAX_NUMEL = limit
                try:
                    row[f"fused_autocast_{label}"] = _timed(lambda: fused(weights, biases), weights + biases, x,
                                                            mode, True)
                finally:
                    _common.GROUPED_CAST_MAX_NUMEL = rule
            row["eager_autocast"] = _timed(lambda: eager(weights, biases), weights + biases, x, mode, True)
            row["eager_bf16_weights"] = _timed(lambda: eager(*low), low[0] + low[1], x, mode, False)
            rows.append(row)
            print(" | ".join(f"{k}={v:.1f}" if isinstance(v, float) else str(v) for k, v in row.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": environment(), "unit": "us (CUDA-graph replay, median)", "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
