import os, subprocess, time, json, torch
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.configs import LINEAR_PINGPONG_CONFIG
dt = torch.bfloat16
m, k, n = 65536, 512, 1792
x = torch.randn(m, k, device="cuda", dtype=dt); w = (torch.randn(n, k, device="cuda") / k**0.5).to(dt)
b = torch.randn(n, device="cuda", dtype=dt); y = torch.empty(m, n, device="cuda", dtype=dt)
def ours(act):
    return lambda: launch_pingpong(linear_act_fwd_pingpong_kernel, LINEAR_PINGPONG_CONFIG, m, n, num_sms(x),
                                   {"x_desc": x}, {"w_desc": w}, {"y_desc": y, "pre_desc": y}, b_ptr=b, M=m, N=n,
                                   K=k, ACT=act, HAS_BIAS=True, STORE_PRE=False)
fns = {"mm": lambda: torch.mm(x, w.t())}
for a in ("identity", "relu", "gelu_tanh", "gelu_tanh_x2"):
    fns[a] = ours(a)
graphs = {}
for name, fn in fns.items():
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(50):
            fn()
    graphs[name] = g
out = os.environ.get("OUT", "/tmp")
res = {}
for rnd in range(2):
    for name, g in (graphs.items() if rnd == 0 else list(graphs.items())[::-1]):
        for _ in range(20):
            g.replay()  # warm to load clocks
        torch.cuda.synchronize()
        log = open(os.path.join(out, f"smi_{name}_{rnd}.csv"), "w")
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                                "--format=csv,noheader,nounits", "-lms", "20"], stdout=log)
        time.sleep(0.3)
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        reps = 60
        for _ in range(reps):
            g.replay()
        en.record(); torch.cuda.synchronize()
        us = st.elapsed_time(en) / reps / 50 * 1e3
        time.sleep(0.05); smi.terminate(); smi.wait(); log.close()
        rows = [l.split(",") for l in open(log.name) if l.strip()]
        rows = rows[len(rows) // 4: -2] or rows
        clk = sum(float(r[0]) for r in rows) / len(rows)
        pw = sum(float(r[1]) for r in rows) / len(rows)
        thr = sorted({r[3].strip() for r in rows})
        res.setdefault(name, []).append({"us": us, "mhz": clk, "watts": pw, "throttle": thr})
        print(f"round {rnd} {name:14s} {us:7.1f} us/launch  sm {clk:6.0f} MHz  {pw:5.0f} W  throttle {thr}")
json.dump(res, open(os.path.join(out, "k512_power.json"), "w"), indent=1)
