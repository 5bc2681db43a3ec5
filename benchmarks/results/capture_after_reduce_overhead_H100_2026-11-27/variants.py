import os, sys, json, torch
if os.environ.get("SEED"): torch.manual_seed(1)
import fusedmlp
fullgraph, act, btrain, calls, rows = sys.argv[1] == "1", sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), tuple(int(v) for v in sys.argv[5].split("x"))
act = None if act == "none" else act
dtype = torch.bfloat16
x = torch.randn(*rows, 128, device="cuda", dtype=dtype, requires_grad=True)
w = (torch.randn(136, 128, device="cuda") / 11).to(dtype)
b = torch.randn(136, device="cuda", dtype=dtype).requires_grad_(btrain)
a = (torch.randn(16, 128, device="cuda") / 11).to(dtype).requires_grad_()
lb = (torch.randn(136, 16, device="cuda") / 4).to(dtype).requires_grad_()
leaves = [x, w, b, a, lb]
g = torch.randn(*rows, 136, device="cuda", dtype=dtype)
fused = lambda x, w, b, a, lb: fusedmlp.lora_linear(x, w, b, a, lb, 2.0, activation=act)
compiled = torch.compile(fused, mode="reduce-overhead", fullgraph=fullgraph)
def step(forward, inputs, mark=False):
    def run():
        if mark: torch.compiler.cudagraph_mark_step_begin()
        y = forward(*inputs)
        return (y, *torch.autograd.grad(y, [t for t in inputs if t.requires_grad], g))
    return run
cs = step(compiled, leaves, True)
for _ in range(calls): cs()
torch.cuda.synchronize()
try:
    fusedmlp.capture_cuda_graph(step(fused, leaves), warmup=2); print(sys.argv[1:], "captured")
except RuntimeError as e:
    print(sys.argv[1:], "FAILED", str(e)[:60].replace("\n", " "))
