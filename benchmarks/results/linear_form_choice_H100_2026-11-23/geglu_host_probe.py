"""Where does the GEGLU forward's host time go at d = 1024, 4096 rows (bf16)? Checks for a
host-device sync (torch.cuda.set_sync_debug_mode), times 200 calls with grad and without
while the GPU is kept busy by a long sleep kernel queued first (the host never waits on it),
and profiles 200 calls with cProfile. Run on a GPU from the repository root:
PYTHONPATH=src python3 benchmarks/results/linear_form_choice_H100_2026-11-23/geglu_host_probe.py"""
import cProfile
import io
import pstats
import time

import torch

from fusedmlp.bench.suites.glu import _forward_fn, _make_inputs

(x, w, b), _ = _make_inputs((1024, 4096), torch.bfloat16)
forward = _forward_fn("fused")
for _ in range(3):
    forward(x, w, b)
torch.cuda.synchronize()
torch.cuda.set_sync_debug_mode(1)  # warns at a call that syncs with the device
forward(x, w, b)
torch.cuda.set_sync_debug_mode(0)
torch.cuda.synchronize()
for label, grad in (("grad", True), ("no_grad", False)):
    with torch.set_grad_enabled(grad):
        torch.cuda._sleep(int(2e9))  # about 1 s of GPU work queued ahead of the calls
        start = time.perf_counter()
        for _ in range(200):
            forward(x, w, b)
        print(label, "host us/call with GPU busy:", round((time.perf_counter() - start) / 200 * 1e6, 1), flush=True)
        torch.cuda.synchronize()
profile = cProfile.Profile()
profile.enable()
for _ in range(200):
    forward(x, w, b)
profile.disable()
torch.cuda.synchronize()
text = io.StringIO()
pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
print(text.getvalue()[:6000])
