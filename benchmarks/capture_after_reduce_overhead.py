"""Does a CUDA-graph capture still work after torch.compile(mode="reduce-overhead") steps ran?

    PYTHONPATH=src python3 benchmarks/capture_after_reduce_overhead.py

A first version of benchmarks/reduce_overhead.py captured the LoRA step with
``fusedmlp.capture_cuda_graph`` after reduce-overhead steps had run in the same process, and
the capture failed (cudaErrorStreamCaptureInvalidated). This probe tells whose capture that is:
each case runs in a fresh process, which first runs the LoRA suite's eager step under
reduce-overhead and then its fused step the same way, a few calls each (``--before``: "ro", as in
that first version; "ro_eager" or "ro_fused" for one of the two; "none" for the control), then
captures one step (``--step``: the plain fused or eager training step, or the eager forward
alone under ``torch.no_grad``), on the tensors the compiled steps ran on, on new ones, or with
some inputs replaced by copies or by new tensors on their memory (``--inputs``), with
``--capture``:
- library: ``fusedmlp.capture_cuda_graph``;
- torch: ``torch.cuda.graph`` after a side-stream warm-up, as PyTorch's notes show (global
  capture error mode, the default);
- torch_thread_local: the same with ``capture_error_mode="thread_local"``, the mode in which
  other threads' CUDA calls do not invalidate the capture (Inductor's cudagraph trees use it).
A captured graph is replayed and its gradients compared with a plain call's. Prints one line per
case and writes capture_after_reduce_overhead.json to $OUT (default .). ``--before`` with
``--step`` and ``--capture`` runs one case in this process (``--shape``, ``--calls`` for it)."""

import argparse
import json
import os
import subprocess
import sys
import traceback

CAPTURES = ("library", "torch", "torch_thread_local")
# (before, step, capture, inputs)
CASES = [(before, step, capture, "same") for before in ("none", "ro") for step in ("fused", "eager")
         for capture in CAPTURES]
CASES += [("ro", "fused", "library", "fresh"), ("ro", "eager", "torch", "fresh"),
          ("ro", "eager_forward", "torch", "same")]
# which tensor carries the failure: one input at a time replaced by a copy
CASES += [("ro", "eager", "torch", "fresh:" + name) for name in ("x", "w", "b", "a+lb", "g")]
CASES += [("ro", "eager", "torch", how + ":x+a+lb") for how in ("fresh", "alias")]
CASES += [("ro", "eager", "torch", "alias:x"), ("ro", "fused", "library", "alias:x")]
# which compiled step leaves the state behind: the eager formula's or the fused op's
CASES += [(before, step, "library", "same") for before in ("ro_eager", "ro_fused") for step in ("eager", "fused")]
NAMES = ("x", "w", "b", "a", "lb")


def one_case(before, step, capture, inputs_for_capture, shape=(8192, 1024, 16), calls=4):
    import torch

    import fusedmlp
    from fusedmlp.bench.suites import lora as lora_suite

    inputs, g = lora_suite._make_inputs(shape, torch.bfloat16)
    wrt = [t for t in inputs if t.requires_grad]

    def training_step(forward, compiled=False):
        def run():
            if compiled:
                torch.compiler.cudagraph_mark_step_begin()
            return torch.autograd.grad(forward(*inputs), wrt, g)
        return run

    if before.startswith("ro"):
        for impl in {"ro": ("eager", "fused"), "ro_eager": ("eager",), "ro_fused": ("fused",)}[before]:
            compiled = training_step(torch.compile(lora_suite._forward_fn(impl), mode="reduce-overhead"), True)
            for _ in range(calls):
                compiled()
        torch.cuda.synchronize()
    if inputs_for_capture == "fresh":
        inputs, g = lora_suite._make_inputs(shape, torch.bfloat16)
    elif ":" in inputs_for_capture:  # fresh: a copy; alias: a new tensor on the same memory
        how, names = inputs_for_capture.split(":")
        replaced = names.split("+")

        def replace(t):
            return t.detach().clone() if how == "fresh" else t.detach()

        g = replace(g) if "g" in replaced else g
        inputs = tuple(replace(t).requires_grad_(t.requires_grad) if name in replaced else t
                       for name, t in zip(NAMES, inputs))
    wrt = [t for t in inputs if t.requires_grad]
    if step == "eager_forward":
        def run():
            with torch.no_grad():
                return [lora_suite._forward_fn("eager")(*inputs)]
    else:
        run = training_step(lora_suite._forward_fn(step))
    expected = [t.clone() for t in run()]
    if capture == "library":
        graph, grads = fusedmlp.capture_cuda_graph(run, warmup=2)
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        mode = "thread_local" if capture == "torch_thread_local" else "global"
        with torch.cuda.graph(graph, capture_error_mode=mode):
            grads = run()
    graph.replay()
    torch.cuda.synchronize()
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(grads, expected))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", choices=["none", "ro", "ro_eager", "ro_fused"])
    parser.add_argument("--step", choices=["fused", "eager", "eager_forward"])
    parser.add_argument("--capture", choices=CAPTURES)
    parser.add_argument("--inputs", default="same",
                        help='"same", "fresh", or "fresh:NAMES" / "alias:NAMES" (NAMES: x, w, b, a, lb, g joined by +)')
    parser.add_argument("--shape", type=int, nargs=3, default=[8192, 1024, 16], help="tokens, d, r")
    parser.add_argument("--calls", type=int, default=4, help="calls of each compiled step")
    parser.add_argument("--only", default="",
                        help="run only the cases whose words contain one of these comma-separated strings")
    args = parser.parse_args()
    if args.before is not None:  # one case, in this process
        try:
            print(json.dumps({"ok": True, "max_grad_diff": one_case(args.before, args.step, args.capture, args.inputs,
                                                                  tuple(args.shape), args.calls)}))
        except Exception as error:  # the probe's answer: which error, raised where
            print(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"[:400],
                              "traceback": traceback.format_exc().splitlines()[-14:]}))
        return
    only = [c for c in CASES if any(part in " ".join(c) for part in args.only.split(","))]
    procs = [subprocess.Popen([sys.executable, __file__, "--before", before, "--step", step, "--capture", capture,
                               "--inputs", inputs], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for before, step, capture, inputs in only]
    rows = []
    for (before, step, capture, inputs), proc in zip(only, procs):  # the cases side by side: compiles are CPU-bound
        stdout, stderr = proc.communicate()
        lines = stdout.strip().splitlines()
        result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {
            "ok": False, "error": f"exit {proc.returncode}: {stderr.strip()[-400:]}"}
        rows.append({"before": before, "step": step, "capture": capture, "inputs": inputs, **result})
        print(f"before={before:8} step={step:13} capture={capture:18} inputs={inputs:10} "
              + ("ok, replay's grads vs a plain call's: max |diff| %.3g" % result["max_grad_diff"]
                 if result["ok"] else "FAILED " + result["error"][:200]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "capture_after_reduce_overhead.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
