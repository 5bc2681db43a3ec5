"""LoRA's backward forms at d = 1024: dx against the merged weight, or the dgrad kernel with the
rank tail, with dB and dA after it or beside it; each with the one-kernel and the merged forward.

    PYTHONPATH=src python3 benchmarks/lora_backward_forms_1024.py [--rounds 3] [--shapes 32768x1024x16,...]

The LoRA suite's inputs and fused step (fusedmlp/bench/suites/lora.py: identity with a frozen
bias and W, gradients for x, A and B, scale 2, bf16). Forms, set through ops/lora.py's
constants while each step is captured in a CUDA graph (a replay runs the kernels captured):

- ``merged_dx``: the library's rule (at 32768 rows dx against the merged weight, since
  M > DGRAD_TAIL_ROWS_PER_OUTPUT * out; at 8192 rows the tail kernel);
- ``tail``: the dgrad kernel with d_xa @ A as its last K steps, dB and dA after it;
- ``tail_beside``: the same with dB and dA beside it on the SMs it leaves
  (``BESIDE_DGRAD_MIN_MACS = 0``);

each with ``MERGED_FORWARD`` False (one-kernel forward) and "always" (merged forward). Timed by
``interleaved_ms`` (L2 flushed before each replay; rounds alternate the order), medians in us,
beside the bare base GEMMs (fwd + dgrad). Prints a table; writes lora_backward_forms_1024.json
to $OUT (default .)."""

import argparse

import torch

import fusedmlp.ops.lora as lora_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import graph_steps, interleaved_us_row, write_record
from fusedmlp.bench.suites import lora as lora_suite

SHAPES = [(32768, 1024, 8), (32768, 1024, 16), (32768, 1024, 64), (8192, 1024, 16)]
SETTINGS = ("MERGED_FORWARD", "DGRAD_TAIL_ROWS_PER_OUTPUT", "BESIDE_DGRAD_MIN_MACS")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="", help="TOKENSxDxR,... (default: four)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    defaults = {name: getattr(lora_ops, name) for name in SETTINGS}
    forms = {"merged_dx": (defaults["DGRAD_TAIL_ROWS_PER_OUTPUT"], defaults["BESIDE_DGRAD_MIN_MACS"]),
             "tail": (1 << 30, 1 << 62), "tail_beside": (1 << 30, 0)}
    rows = []
    for shape in shapes:
        inputs, g = lora_suite._make_inputs(shape, torch.bfloat16)
        replays = {}
        for forward in (False, "always"):
            for form, (tail_rows, beside_macs) in forms.items():
                for name, value in zip(SETTINGS, (forward, tail_rows, beside_macs)):
                    setattr(lora_ops, name, value)
                name = f"{'merged' if forward else 'one_kernel'} {form}"
                replays[name] = graph_steps(lora_suite._forward_fn("fused"), inputs, g)["fwd+bwd"]
        for name, value in defaults.items():
            setattr(lora_ops, name, value)
        x, w = inputs[0].detach(), inputs[1]
        replays["floor"] = capture_cuda_graph(lambda: (torch.mm(x, w.t()), torch.mm(g, w)))[0].replay
        rows.append(interleaved_us_row(replays, args.rounds, shape=shape))
    write_record("lora_backward_forms_1024", rows=rows)
    names = [f"{forward} {form}" for forward in ("one_kernel", "merged") for form in forms]
    print("\n| tokens x d, r | " + " | ".join(names) + " | floor |")
    print("|---|" + "---|" * (len(names) + 1))
    for row in rows:
        m, d, r = row["shape"]
        print(f"| {m} x {d}, r {r} | " + " | ".join(f"{row[n]:.1f}" for n in names) + f" | {row['floor']:.1f} |")


if __name__ == "__main__":
    main()
