"""LoRA forward+backward steps with the rank products dB, dA beside the dgrad kernel or after it.

    STEPS=30 python benchmarks/lora_beside_dgrad.py 8192x4096x16 32768x4096x16 ...   (TOKENSxDxR, bf16)

ops/lora.py runs dB = g.T @ xs and dA = d_xa.T @ x on the current stream while the tail dgrad
kernel runs on a high-priority stream with the fewest programs that take as many rounds of tiles,
for base GEMMs from BESIDE_DGRAD_MIN_MACS multiply-adds. Forms: ``after`` (the threshold set past
every shape: the products after the kernel, one stream) and ``beside`` (set to 0), with eager
PEFT-style (base linear plus two small linears) and the floor (x @ W.T and g @ W on cuBLAS). W
frozen, A and B trained, bias frozen (as `fusedmlp bench lora`), the backward on the calling
thread (BACKWARD_THREAD=device: on autograd's device thread). Checks that both forms give the same
gradient bits, plain and replayed from CUDA graphs. Each step is timed after an L2 flush, graphed
and plain, two ways: interleaved (the forms in turn step by step, rotated, 3 rounds of STEPS, a
round's median) and in blocks of one form (40 steps, the first 10 not counted; 2 rounds, every
other in reverse order; the mean of the block medians), which is how the suite and a training loop
run them: under the board's power cap the clocks follow the load of the block. Writes
$OUT/lora_beside_dgrad[_device_thread].json.
"""
import json, os, sys
import torch
import torch.nn.functional as F
import fusedmlp.ops.lora as ops
import fusedmlp.ops._common as common

# BACKWARD_THREAD=device: the backward on autograd's device thread, as `fusedmlp bench` runs it
torch.autograd.set_multithreading_enabled(os.environ.get("BACKWARD_THREAD", "caller") == "device")
SCALE = 2.0
VARIANTS = {"after": (1 << 62, False), "beside": (0, False), "beside2": (0, True)}  # BESIDE_DGRAD_MIN_MACS
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
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
            ops.BESIDE_DGRAD_MIN_MACS, common.FORK_MEANWHILE_STREAM = VARIANTS[name]
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
    diff = {n: [float((p - q).abs().max()) for p, q in zip(grads[n], grads["after"])] for n in grads}
    plain = dict(steps)
    graphed, refs = {}, {}
    for name, step in steps.items():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graphed[name] = graph.replay
        refs[name] = (x.grad, a.grad, lb.grad)
    # graphed replays' results equal the plain step's
    for name in VARIANTS:
        graphed[name](); torch.cuda.synchronize()
        assert all(torch.equal(t.float(), q) for t, q in zip(refs[name], grads[name])), name
    row = dict(shape=shape, grad_max_abs_diff_vs_after=diff)
    for kind, table in (("graphed", graphed), ("plain", plain)):
        names = list(table)
        for n in names:
            table[n](); table[n]()
        # interleaved: step by step, rotated
        inter = {n: [] for n in names}
        for rnd in range(3):
            events = {n: [] for n in names}
            for i in range(int(os.environ.get("STEPS", 30))):
                for n in names[i % len(names):] + names[:i % len(names)]:
                    flush.zero_()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record(); table[n](); e.record(); events[n].append((s, e))
            torch.cuda.synchronize()
            for n in names:
                t = sorted(p.elapsed_time(q) for p, q in events[n][3:])
                inter[n].append(t[len(t) // 2])
        # blocks of one step kind (as the suite and a training loop run them)
        blocks = {n: [] for n in names}
        for rnd in range(2):
            for n in (names if rnd % 2 == 0 else names[::-1]):
                ev = []
                for i in range(40):
                    flush.zero_()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record(); table[n](); e.record(); ev.append((s, e))
                torch.cuda.synchronize()
                t = sorted(p.elapsed_time(q) for p, q in ev[10:])
                blocks[n].append(t[len(t) // 2])
        med = lambda v: sorted(v)[len(v) // 2]
        row[kind] = dict(interleaved=inter, blocks=blocks,
                         median_interleaved={n: med(v) for n, v in inter.items()},
                         mean_blocks={n: sum(v) / len(v) for n, v in blocks.items()})
        mi, mb = row[kind]["median_interleaved"], row[kind]["mean_blocks"]
        print(f"{shape} {kind:8s} interleaved " + " ".join(f"{n}={v:.4f}" for n, v in mi.items())
              + f" eager/after={mi['eager']/mi['after']:.3f} eager/beside={mi['eager']/mi['beside']:.3f} eager/beside2={mi['eager']/mi['beside2']:.3f}", flush=True)
        print(f"{shape} {kind:8s} blocks      " + " ".join(f"{n}={v:.4f}" for n, v in mb.items())
              + f" eager/after={mb['eager']/mb['after']:.3f} eager/beside={mb['eager']/mb['beside']:.3f} eager/beside2={mb['eager']/mb['beside2']:.3f}", flush=True)
    print(shape, "grad max abs diff against after", diff, flush=True)
    rows_out.append(row)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows_out),
          open(os.path.join(os.environ.get("OUT", "."), "lora_beside_dgrad%s.json"
                       % ("_device_thread" if os.environ.get("BACKWARD_THREAD") == "device" else "")), "w"), indent=1)
