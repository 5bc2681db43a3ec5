"""Seconds of the first forward+backward of each workload in a fresh process, with and without
the tuning cache (kernels/tuning_cache.py).

    python benchmarks/first_call_time.py [--out results.json] [--workloads a,b,...]

For each workload, four processes in turn, each timing its first fwd+bwd step (and a second
one, for reference) end to end:
- ``compile``: Triton's compile cache and the tuning cache both empty (compiles every config
  and times every candidate: a first run on a new machine);
- ``tune``: the compile cache now full, the tuning cache still empty (what every new process
  paid before the tuning cache);
- ``cached``: both full (what a new process pays now);
- ``untuned``: ``FUSEDMLP_AUTOTUNE=0`` (first configs and fixed rules: the floor).
The ``cached`` process checks that its outputs and gradients have the bits of the ``tune``
one (same inputs, same choices). Prints a table and writes JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

WORKLOADS = {
    # name: code defining `inputs` (tensors that take gradients), `modules` and `forward()`
    "linear_act 16384x512->1792": """
inputs = [torch.randn(16384, 512, device=dev, dtype=bf, requires_grad=True)]
modules = [fusedmlp.FusedLinear(512, 1792, activation="gelu_tanh", device=dev, dtype=bf)]
forward = lambda: [modules[0](inputs[0])]
""",
    "geglu 16384x4096->2x16384": """
inputs = [torch.randn(16384, 4096, device=dev, dtype=bf, requires_grad=True)]
modules = [fusedmlp.GEGLU(4096, 16384, device=dev, dtype=bf)]
forward = lambda: [modules[0](inputs[0])]
""",
    "swiglu 16384x4096->14336": """
inputs = [torch.randn(16384, 4096, device=dev, dtype=bf, requires_grad=True)]
modules = [fusedmlp.SwiGLU(4096, 14336, device=dev, dtype=bf)]
forward = lambda: [modules[0](inputs[0])]
""",
    "lora 8192x4096 r16": """
inputs = [torch.randn(8192, 4096, device=dev, dtype=bf, requires_grad=True)]
modules = [fusedmlp.LoRALinear(4096, 4096, r=16, alpha=32, device=dev, dtype=bf)]
with torch.no_grad():
    for p in modules[0].parameters():
        p.normal_(std=0.02)
forward = lambda: [modules[0](inputs[0])]
""",
    "mlp bottom+top 2048": """
inputs = [torch.randn(2048, 13, device=dev, dtype=bf, requires_grad=True),
          torch.randn(2048, 367, device=dev, dtype=bf, requires_grad=True)]
modules = [fusedmlp.FusedMLP([13, 512, 256, 64, 16], device=dev, dtype=bf),
           fusedmlp.FusedMLP([367, 512, 256, 1], last_activation="sigmoid", device=dev, dtype=bf)]
forward = lambda: [modules[0](inputs[0]), modules[1](inputs[1])]
""",
}

_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import torch
import fusedmlp
dev, bf = "cuda", torch.bfloat16
torch.manual_seed(0)
exec(sys.argv[1])

def step():
    for t in inputs + [p for m in modules for p in m.parameters()]:
        t.grad = None
    outs = forward()
    sum(o.float().square().mean() for o in outs).backward()
    grads = [t.grad for t in inputs + [p for m in modules for p in m.parameters()] if t.grad is not None]
    return outs + grads

torch.cuda.synchronize()
ready = time.perf_counter()
out = step()
torch.cuda.synchronize()
first = time.perf_counter()
step()
torch.cuda.synchronize()
second = time.perf_counter()
torch.save([t.detach().float().cpu() for t in out], sys.argv[2])
print(json.dumps({"import_setup_s": ready - start, "first_step_s": first - ready, "second_step_s": second - first}))
"""

def _run(code, env, out_path):
    done = subprocess.run([sys.executable, "-c", _CHILD, code, out_path], env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON file to write")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated names of " + ", ".join(WORKLOADS))
    args = parser.parse_args()
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.workloads.split(","):
            code = WORKLOADS[name]
            folder = os.path.join(scratch, name.replace(" ", "_"))
            base = dict(os.environ, FUSEDMLP_AUTOTUNE="1", TRITON_CACHE_DIR=os.path.join(folder, "triton"))
            row = {"workload": name}
            for phase, extra in (("compile", {"FUSEDMLP_TUNING_CACHE": os.path.join(folder, "tuning_first")}),
                                 ("tune", {"FUSEDMLP_TUNING_CACHE": os.path.join(folder, "tuning")}),
                                 ("cached", {"FUSEDMLP_TUNING_CACHE": os.path.join(folder, "tuning")}),
                                 ("untuned", {"FUSEDMLP_AUTOTUNE": "0", "FUSEDMLP_TUNING_CACHE": "0"})):
                row[phase] = _run(code, dict(base, **extra), os.path.join(folder, f"{phase}.pt"))
                print(name, phase, row[phase], flush=True)
            tune, cached = (torch.load(os.path.join(folder, f"{p}.pt")) for p in ("tune", "cached"))
            row["cached_bits_equal_tune"] = all(torch.equal(a, b) for a, b in zip(tune, cached))
            rows.append(row)
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton

    env["triton"] = triton.__version__
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    print(f"\nfirst fwd+bwd step, seconds ({env['device']})")
    print(f"{'workload':30s} {'compile':>8s} {'tune':>8s} {'cached':>8s} {'untuned':>8s} {'2nd step':>8s}  same bits")
    for row in rows:
        print(f"{row['workload']:30s} " + " ".join(f"{row[p]['first_step_s']:8.2f}" for p in ("compile", "tune", "cached", "untuned"))
              + f" {row['cached']['second_step_s']:8.3f}  {row['cached_bits_equal_tune']}")


if __name__ == "__main__":
    main()
