"""The kernels of DLRM's MLP steps as ``fusedmlp bench mlp`` replays them from CUDA graphs
(fused_graph and cuda_graph: fused and eager, fwd and fwd+bwd), one CUDA GPU, bf16.

    python benchmarks/mlp_step_kernels.py [ROWS] [TAG]    (writes $OUT/step_kernels_ROWS[_TAG].json)

For the top (367-512-256-1) and bottom (13-512-256-64-16) MLPs at ROWS rows (default 2048):
the replay's median time as the bench takes it (three times), then each kernel's mean
duration over 20 replays under the PyTorch profiler. First, the replay of a graph holding one
tiny kernel: the part of every figure that is the graph's own. TAG names the tree timed when
two trees are compared (run once with PYTHONPATH at each).
"""
import collections, json, os, sys
import torch
from torch.profiler import profile, ProfilerActivity
from fusedmlp.bench.harness import median_ms, graph_steps
from fusedmlp.bench.suites.mlp import _forward_fn, _make_inputs, _eager_fn, _last_activation

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
tag = "_" + sys.argv[2] if len(sys.argv) > 2 else ""
out = {}
# fixed cost of a replay: a graph holding one tiny kernel
z = torch.zeros(1, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    z.add_(1)
torch.cuda.current_stream().wait_stream(s)
gr = torch.cuda.CUDAGraph()
with torch.cuda.graph(gr):
    z.add_(1)
out["one_tiny_kernel_graph_us"] = median_ms(gr.replay) * 1e3
print("one tiny kernel graph us", out["one_tiny_kernel_graph_us"], flush=True)
for sizes in ((367, 512, 256, 1), (13, 512, 256, 64, 16)):
    shape = (rows, *sizes)
    inputs, g = _make_inputs(shape, torch.bfloat16)
    steps = {"fused": graph_steps(_forward_fn(shape)("fused"), inputs, g),
             "eager": graph_steps(_eager_fn(_last_activation(sizes)), inputs, g)}
    for impl, modes in steps.items():
        for mode, replay in modes.items():
            t = [median_ms(replay) * 1e3 for _ in range(3)]
            key = f"{'-'.join(map(str, sizes))} {impl} {mode}"
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    replay()
                torch.cuda.synchronize()
            kern = collections.defaultdict(list)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kern[e.name].append(e.device_time)
            ks = sorted(((n, sum(v) / 20, len(v) / 20) for n, v in kern.items()), key=lambda r: -r[1])
            out[key] = {"us": t, "kernels": [(n[:90], round(us, 2), c) for n, us, c in ks]}
            print(f"{key}: us {['%.1f' % x for x in t]} sum kernels {sum(k[1] for k in ks):.1f}", flush=True)
            for n, us, c in ks:
                print(f"    {us:7.2f} x{c:.0f}  {n[:110]}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), f"step_kernels_{rows}{tag}.json"), "w"), indent=1)
