"""Host time of one fused LoRA step (8192 x 1024, r = 16, bf16): fwd, bwd, fwd+bwd, and checks.

    [taskset -c CPUS] python benchmarks/step_host_time.py

Prints whether the fwd+bwd step synchronises (PyTorch's sync debug mode), allocates new
segments, which thread runs the backward, and the time per step of fwd+bwd (with and without
a sync after each half), fwd alone and bwd alone. The figures in benchmarks/NOTES.md
("LoRA steps at d = 1024") came from this, with and without ``taskset``.
"""

import time, warnings, torch, threading
import fusedmlp
dt=torch.bfloat16
n,d,r=8192,1024,16
x=torch.randn(n,d,device="cuda",dtype=dt,requires_grad=True)
w=torch.randn(d,d,device="cuda",dtype=dt)/32; b=torch.randn(d,device="cuda",dtype=dt)
a=(torch.randn(r,d,device="cuda",dtype=dt)/32).requires_grad_(); lb=(torch.randn(d,r,device="cuda",dtype=dt)/4).requires_grad_()
g=torch.randn(n,d,device="cuda",dtype=dt)
f=lambda: fusedmlp.lora_linear(x,w,b,a,lb,2.0)
fb=lambda: torch.autograd.grad(f(),(x,a,lb),g)
for _ in range(30): fb()
torch.cuda.synchronize()
s0=torch.cuda.memory_stats()
torch.cuda.set_sync_debug_mode(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(20): fb()
torch.cuda.set_sync_debug_mode(0)
torch.cuda.synchronize(); s1=torch.cuda.memory_stats()
print("sync warnings:", len(caught), set(str(c.message)[:120] for c in caught))
print("segments allocated during 20 steps:", s1["segment.all.allocated"]-s0["segment.all.allocated"], "alloc retries", s1["num_alloc_retries"]-s0["num_alloc_retries"])
thread_ids=set()
import fusedmlp.ops.lora as L
orig=L._backward
def spy(*args, **kw):
    thread_ids.add(threading.get_ident()); return orig(*args, **kw)
L._backward=spy
for _ in range(5): fb()
print("backward threads", thread_ids, "main", threading.get_ident())
L._backward=orig
# step time with a sync after the forward (separates: if unchanged, forward already waits)
def timed(fn, calls=300):
    for _ in range(20): fn()
    torch.cuda.synchronize(); t=time.perf_counter()
    for _ in range(calls): fn()
    torch.cuda.synchronize(); return (time.perf_counter()-t)/calls*1e6
print("fwd+bwd", timed(fb))
def fb_sync():
    y=f(); torch.cuda.synchronize(); torch.autograd.grad(y,(x,a,lb),g); torch.cuda.synchronize()
print("fwd+bwd with syncs", timed(fb_sync))
y=f(); torch.cuda.synchronize()
print("fwd only", timed(f), "bwd only", timed(lambda: torch.autograd.grad(y,(x,a,lb),g,retain_graph=True)))
