import os, re, collections, torch
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.configs import LINEAR_PINGPONG_CONFIG
dt = torch.bfloat16
m, k, n = 16384, 512, 1792
x = torch.randn(m, k, device="cuda", dtype=dt); w = torch.randn(n, k, device="cuda", dtype=dt)
b = torch.randn(n, device="cuda", dtype=dt); y = torch.empty(m, n, device="cuda", dtype=dt)
out = os.environ.get("OUT", "/tmp")
for act in ("identity", "relu", "gelu_tanh"):
    launch_pingpong(linear_act_fwd_pingpong_kernel, LINEAR_PINGPONG_CONFIG, m, n, num_sms(x), {"x_desc": x},
                    {"w_desc": w}, {"y_desc": y, "pre_desc": y}, b_ptr=b, M=m, N=n, K=k, ACT=act, HAS_BIAS=True,
                    STORE_PRE=False)
fast = linear_act_fwd_pingpong_kernel._fusedmlp_fast
for key, (compiled, meta, direct) in fast.cache.items():
    act = [p for p in key if isinstance(p, tuple) and p[0] == "ACT"][0][1]
    sass = compiled.asm.get("sass") or ""
    if not sass:
        import subprocess, tempfile
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(compiled.asm["cubin"])
        sass = subprocess.run(["cuobjdump", "--dump-sass", f.name], capture_output=True, text=True).stdout
    open(os.path.join(out, f"fwd_{act}.sass"), "w").write(sass)
    open(os.path.join(out, f"fwd_{act}.ptx"), "w").write(compiled.asm["ptx"])
    ops = collections.Counter(re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass, re.M))
    print(act, "regs", compiled.n_regs, "spills", compiled.n_spills, "total", sum(ops.values()))
    print("   ", ", ".join(f"{o} {c}" for o, c in ops.most_common(40)))
