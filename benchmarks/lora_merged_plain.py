"""Why a plain call of LoRA's merged forward takes longer than its graph replay.

    PYTHONPATH=src python3 benchmarks/lora_merged_plain.py

The LoRA suite's fused forward (fusedmlp/bench/suites/lora.py: identity, frozen W and bias, x,
A and B requiring gradients) at 32768 x 1024, r 16 and 64, with ``ops.lora.MERGED_FORWARD``
"always" and False (the one-kernel forms). For each: whether the call synchronizes with the GPU
(``torch.cuda.set_sync_debug_mode("warn")``), the host time per call with the GPU kept busy
(issue time), do_bench's median (L2 flushed before each call, as the suite's plain timing), the
median with no flush, and the GPU kernels of one call (torch.profiler). Prints what it finds."""

import time
import warnings

import torch
import triton.testing

import fusedmlp.ops.lora as lora_ops
from fusedmlp.bench.suites import lora as lora_suite


def main():
    for r in (16, 64):
        inputs, _ = lora_suite._make_inputs((32768, 1024, r), torch.bfloat16)
        forward = lora_suite._forward_fn("fused")
        for merged in ("always", False):
            lora_ops.MERGED_FORWARD = merged
            name = f"r {r} {'merged' if merged else 'one-kernel'}"
            for _ in range(3):
                forward(*inputs)
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                forward(*inputs)
                torch.cuda.set_sync_debug_mode(0)
            syncs = [str(w.message).splitlines()[0][:100] for w in caught if "synchroniz" in str(w.message)]
            # the host's issue time: the GPU kept busy by a long sleep, so no launch waits for it
            torch.cuda._sleep(200_000_000)
            start = time.perf_counter()
            for _ in range(20):
                forward(*inputs)
            issue_us = (time.perf_counter() - start) / 20 * 1e6
            torch.cuda.synchronize()
            flushed = triton.testing.do_bench(lambda: forward(*inputs), return_mode="median") * 1000
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_event.record()
            for _ in range(50):
                forward(*inputs)
            end_event.record()
            torch.cuda.synchronize()
            unflushed = start_event.elapsed_time(end_event) / 50 * 1000
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                forward(*inputs)
                torch.cuda.synchronize()
            kernels = [(e.name[:60], round(e.device_time, 1)) for e in prof.events()
                       if e.device_type == torch.autograd.DeviceType.CUDA]
            print(f"{name}: syncs {syncs or 'none'}; issue {issue_us:.1f} us/call; do_bench {flushed:.1f} us "
                  f"(back to back, no flush: {unflushed:.1f}); kernels {kernels}", flush=True)
    lora_ops.MERGED_FORWARD = True


if __name__ == "__main__":
    main()
