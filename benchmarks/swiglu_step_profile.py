"""Kernel times of one SwiGLU training step (fusedmlp.SwiGLU, store mode, bf16) under torch.profiler,
beside torch.compile's step of the same function.

    python benchmarks/swiglu_step_profile.py [TOKENS D HIDDEN [ACTIVATION]]   (default 16384 512 1792 silu)

For each of the fused module and ``torch.compile`` of the eager feed-forward: runs 10 untimed
steps, then profiles 20 (forward, backward into .grad, as a training loop does: the later
steps add into the gradients), and prints the CUDA kernel table (times summed over the 20).
"""
import sys

import torch
import fusedmlp
from fusedmlp.bench.harness import profile_steps
from fusedmlp.ops.activations import activation_reference

tokens, d, hidden = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (16384, 512, 1792)
activation = sys.argv[4] if len(sys.argv) > 4 else "silu"
dt = torch.bfloat16
module = fusedmlp.SwiGLU(d, hidden, activation=activation).cuda().to(dt)
x = torch.randn(tokens, d, device="cuda", dtype=dt, requires_grad=True)
g = torch.randn(tokens, d, device="cuda", dtype=dt)


def eager(x):
    return module.down_proj(activation_reference(module.gate_proj(x), activation) * module.up_proj(x))


compiled = torch.compile(eager)
print(f"SwiGLU {tokens} x {d} -> {hidden}, {activation}, bf16, {torch.cuda.get_device_name()}, "
      f"torch {torch.__version__}")
for name, forward in (("fused", module), ("compile", compiled)):
    def step():
        forward(x).backward(g)

    prof = profile_steps(step)
    print(f"--- {name} (20 steps)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
