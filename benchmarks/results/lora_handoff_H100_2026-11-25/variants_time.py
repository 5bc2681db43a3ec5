import importlib, sys, torch, json, os
sys.path.insert(0, "scratch")
import fusedmlp.ops.lora as ops
import fusedmlp.ops.linear_act as linear_ops
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.configs import LORA_HANDOFF_CONFIG
from fusedmlp.ops._common import cdiv
from fusedmlp.bench.harness import graph_us
from fusedmlp.bench.suites.lora import sweep_operands
kernels = {n: importlib.import_module(f"hx_{n}").lora_fwd_handoff_kernel for n in ["E0", "E1", "E2", "E3", "E4", "E5"]}
def run(kernel, x, w, b, a, lb, r):
    m, k = x.shape; n = w.shape[0]
    rank_block = ops._rank_block(r)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    xs = torch.empty((m, r), dtype=x.dtype, device=x.device)
    meta = dict(LORA_HANDOFF_CONFIG)
    bm, bn, bk = (meta.pop(q) for q in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    tm = 2 * bm
    flags = torch.zeros((cdiv(m, tm),), dtype=torch.int32, device=x.device)
    hi, lo = ops._split_scale(2.0)
    blocks = {"x_desc": (tm, bk), "w_desc": (bn, bk), "rank_a_desc": (rank_block, bk), "xs_desc": (tm, bk),
              "lora_b_desc": (bn, bk), "y_desc": (bm, bn), "pre_desc": (bm, bn)}
    launch(kernel, (min(132, cdiv(m, tm) * cdiv(n, bn)),), x_desc=x, w_desc=w, rank_a_desc=a, xs_desc=xs, lora_b_desc=lb,
           b_ptr=b, xs_ptr=xs, flags_ptr=flags, y_desc=y, pre_desc=y, M=m, N=n, K=k, R=r, SCALE_HI=hi, SCALE_LO=lo,
           ACT="identity", HAS_BIAS=True, STORE_PRE=False, **meta, descriptor_blocks=blocks)
    return y, xs
rows = []
for m, k, n, r in [(8192, 4096, 4096, 16), (2048, 4096, 4096, 16), (32768, 4096, 4096, 16), (32768, 1024, 1024, 16)]:
    x, w, b, a, lb = sweep_operands(m, k, n, r)
    calls = {"linear_act": lambda: linear_ops.linear_act_forward_impl(x, w, b, "identity", False)}
    for name, kern in kernels.items():
        calls[name] = (lambda kern=kern: run(kern, x, w, b, a, lb, r))
    times = {q: [] for q in calls}
    for rnd in range(2):
        for q in (list(calls) if rnd == 0 else list(calls)[::-1]):
            times[q].append(graph_us(calls[q]))
    row = {"shape": [m, k, n, r], **{q: round(min(t), 1) for q, t in times.items()}}
    y0, xs0 = run(kernels["E0"], x, w, b, a, lb, r)
    for q in ("E1", "E4", "E5"):
        y1, xs1 = run(kernels[q], x, w, b, a, lb, r)
        row[q + "_ydiff"] = (y1.float() - y0.float()).abs().max().item()
    print(json.dumps(row), flush=True)
    rows.append(row)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "handoff_exp.json"), "w"), indent=1)
