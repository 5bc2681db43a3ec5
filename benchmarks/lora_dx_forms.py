"""LoRA forward+backward steps with the backward's dx in each of its forms, A/B in one process.

    GRAPHED=1 STEPS=40 python benchmarks/lora_dx_forms.py 8192x4096x16 32768x4096x16 ...   (TOKENSxDxR, bf16)

Forms (ops/lora.py, switched by replacing its two helpers for the step): ``addmm_merged`` (dx
against W + s * B @ A formed by torch.addmm, the library before the dgrad kernel), ``merge_kernel``
(the same weight from lora_merge_kernel), ``tail`` (the library's rule: the dgrad kernel with
d_xa @ A as its last K steps where it applies); with eager PEFT-style (base linear plus two small
linears) and the floor (x @ W.T and g @ W on cuBLAS). W frozen, A and B trained, the backward on
the calling thread. Each step is timed alone after an L2 flush, the forms in turn step by step
(rotated), 3 rounds of STEPS steps each, a round's median per form; under sustained load the
board's clocks drift by several percent between blocks, which timing blocks of one form at a time
would compare. GRAPHED=1 replays each form's step from a CUDA graph (kernel time, no host).
Also checks each form's dx against the tail form's. Writes $OUT/lora_step_ab[_graphed].json.
"""
import json, os, sys
import torch
import torch.nn.functional as F
import fusedmlp.ops.lora as ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import stepwise_ms

torch.autograd.set_multithreading_enabled(False)
SCALE = 2.0
real_merge, real_tail = ops._merged_weight, ops._dgrad_tail_wanted
VARIANTS = {
    "addmm_merged": (lambda w, b, a, s, t: torch.addmm(w, b, a, alpha=s), lambda *a: False),
    "merge_kernel": (real_merge, lambda *a: False),
    "tail": (real_merge, real_tail),
}


rows_out = []
for shape in sys.argv[1:]:
    m, d, r = (int(v) for v in shape.split("x"))
    torch.manual_seed(0)
    x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(d, d, device="cuda") / d**0.5).bfloat16()
    b = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    a = (torch.randn(r, d, device="cuda") / d**0.5).bfloat16().requires_grad_()
    lb = (torch.randn(d, r, device="cuda") / r**0.5).bfloat16().requires_grad_()
    g = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)

    def fused_step(name):
        merge, tail = VARIANTS[name]
        def step():
            ops._merged_weight, ops._dgrad_tail_wanted = merge, tail
            x.grad = a.grad = lb.grad = None
            ops.lora_linear(x, w, b, a, lb, SCALE).backward(g)
        return step

    def eager_step():
        x.grad = a.grad = lb.grad = None
        (F.linear(x, w, b) + F.linear(F.linear(x, a), lb) * SCALE).backward(g)

    xd = x.detach()
    steps = {name: fused_step(name) for name in VARIANTS}
    steps["eager"] = eager_step
    steps["gemm"] = lambda: (torch.mm(xd, w.t()), torch.mm(g, w))
    # correctness of each variant's dx against the tail's
    grads = {}
    for name in VARIANTS:
        steps[name](); torch.cuda.synchronize(); grads[name] = x.grad.float().clone()
    diff = {n: float((grads[n] - grads["tail"]).abs().max() / grads["tail"].abs().max()) for n in grads}
    if os.environ.get("GRAPHED"):
        steps = {name: capture_cuda_graph(step)[0].replay for name, step in steps.items()}
    # step by step, the variants in turn (rotated each time): the board's clocks drift under
    # sustained load by several percent between blocks, so blocks of one variant are not compared
    for n in steps:
        steps[n](); steps[n]()
    res = stepwise_ms(steps, rounds=3, count=int(os.environ.get("STEPS", 30)), skip=3, rotated=True)
    row = dict(shape=shape, dx_rel_diff=diff, ms={n: v for n, v in res.items()},
               median={n: sorted(v)[len(v) // 2] for n, v in res.items()})
    rows_out.append(row)
    med = row["median"]
    print(shape, " ".join(f"{n}={v:.4f}" for n, v in med.items()),
          f"eager/tail={med['eager']/med['tail']:.3f} eager/addmm={med['eager']/med['addmm_merged']:.3f}"
          f" tail/gemm={med['tail']/med['gemm']:.3f}", flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows_out),
          open(os.path.join(os.environ.get("OUT", "."), "lora_step_ab%s.json" % ("_graphed" if os.environ.get("GRAPHED") else "")), "w"), indent=1)
