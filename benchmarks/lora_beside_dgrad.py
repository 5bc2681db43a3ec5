"""LoRA forward+backward steps with the rank products dB, dA beside the dgrad kernel or after it
(or, with SWITCH=HANDOFF_FORWARD, with the forward's xs from cuBLAS or lora_fwd_handoff_kernel).

    STEPS=30 python benchmarks/lora_beside_dgrad.py 8192x4096x16 32768x4096x16 ...   (TOKENSxDxR, bf16)
    SWITCH=HANDOFF_FORWARD STEPS=30 python benchmarks/lora_beside_dgrad.py ...        (forms before, handoff)

ops/lora.py runs dB = g.T @ xs and dA = d_xa.T @ x on the current stream while the tail dgrad
kernel runs on a high-priority stream with the fewest programs that take as many rounds of tiles,
for base GEMMs from BESIDE_DGRAD_MIN_MACS multiply-adds. Forms: ``after`` (the threshold set past
every shape: the products after the kernel, one stream) and ``beside`` (set to 0), with eager
PEFT-style (base linear plus two small linears) and the floor (x @ W.T and g @ W on cuBLAS). W
frozen, A and B trained, bias frozen (as `fusedmlp bench lora`), the backward on the calling
thread (BACKWARD_THREAD=device: on autograd's device thread). Prints the largest gradient
difference between the forms (zero: the same bits; both forward forms write the same y and xs)
and checks that graphed replays give the plain step's bits. Each step is timed after an L2
flush, graphed and plain, two ways: interleaved (the forms in turn step by step, rotated, 3
rounds of STEPS, a round's median) and in blocks of one form (40 steps, the first 10 not
counted; 2 rounds, every other in reverse order; the mean of the block medians), which is how
the suite and a training loop run them: under the board's power cap the clocks follow the load
of the block. Writes
$OUT/lora_beside_dgrad[_handoff_forward][_device_thread].json.
"""
import json, os, sys
import torch
import torch.nn.functional as F
import fusedmlp.ops.lora as ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import stepwise_ms

# BACKWARD_THREAD=device: the backward on autograd's device thread, as `fusedmlp bench` runs it
torch.autograd.set_multithreading_enabled(os.environ.get("BACKWARD_THREAD", "caller") == "device")
SCALE = 2.0
SWITCH = os.environ.get("SWITCH", "BESIDE_DGRAD_MIN_MACS")  # the ops/lora.py setting the forms differ in
VARIANTS = {"BESIDE_DGRAD_MIN_MACS": {"after": 1 << 62, "beside": 0},
            "HANDOFF_FORWARD": {"before": False, "handoff": True}}[SWITCH]
FIRST, SECOND = VARIANTS
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
        def step():
            setattr(ops, SWITCH, VARIANTS[name])
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
    grads = {}
    for name in VARIANTS:
        steps[name](); torch.cuda.synchronize()
        grads[name] = [t.grad.float().clone() for t in (x, a, lb)]
    diff = {n: [float((p - q).abs().max()) for p, q in zip(grads[n], grads[FIRST])] for n in grads}
    plain = dict(steps)
    graphed, refs = {}, {}
    for name, step in steps.items():
        graphed[name] = capture_cuda_graph(step)[0].replay
        refs[name] = (x.grad, a.grad, lb.grad)
    # graphed replays' results equal the plain step's
    for name in VARIANTS:
        graphed[name](); torch.cuda.synchronize()
        assert all(torch.equal(t.float(), q) for t, q in zip(refs[name], grads[name])), name
    row = dict(shape=shape, **{f"grad_max_abs_diff_vs_{FIRST}": diff})
    for kind, table in (("graphed", graphed), ("plain", plain)):
        for n in table:
            table[n](); table[n]()
        inter = stepwise_ms(table, rounds=3, count=int(os.environ.get("STEPS", 30)), skip=3, rotated=True)
        blocks = stepwise_ms(table, rounds=2, count=40, skip=10, rotated=False)
        med = lambda v: sorted(v)[len(v) // 2]
        row[kind] = dict(interleaved=inter, blocks=blocks,
                         median_interleaved={n: med(v) for n, v in inter.items()},
                         mean_blocks={n: sum(v) / len(v) for n, v in blocks.items()})
        mi, mb = row[kind]["median_interleaved"], row[kind]["mean_blocks"]
        print(f"{shape} {kind:8s} interleaved " + " ".join(f"{n}={v:.4f}" for n, v in mi.items())
              + f" eager/{FIRST}={mi['eager']/mi[FIRST]:.3f} eager/{SECOND}={mi['eager']/mi[SECOND]:.3f}", flush=True)
        print(f"{shape} {kind:8s} blocks      " + " ".join(f"{n}={v:.4f}" for n, v in mb.items())
              + f" eager/{FIRST}={mb['eager']/mb[FIRST]:.3f} eager/{SECOND}={mb['eager']/mb[SECOND]:.3f}", flush=True)
    print(shape, f"grad max abs diff against {FIRST}", diff, flush=True)
    rows_out.append(row)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows_out),
          open(os.path.join(os.environ.get("OUT", "."), "lora_beside_dgrad%s%s.json"
                            % ("" if SWITCH == "BESIDE_DGRAD_MIN_MACS" else "_" + SWITCH.lower(),
                               "_device_thread" if os.environ.get("BACKWARD_THREAD") == "device" else "")), "w"),
          indent=1)
