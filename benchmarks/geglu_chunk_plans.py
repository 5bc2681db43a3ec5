"""What GEGLU's recompute backward pays for its row chunks, and steps with fewer chunks.

    PYTHONPATH=src python3 benchmarks/geglu_chunk_plans.py [--rounds 3] [--shapes 2048x16384,1024x32768]
                                                          [--chunks 4,3,2,1]

The recompute backward forms dh (``[N, 8d]``) a row chunk at a time so that one chunk's dh is
alive at a time (ops/_common.py ``backward_row_chunks``: up to BWD_MAX_CHUNKS = 4 chunks where
dh exceeds 256 MiB); each chunk's dx rows come from one cuBLAS product and dW adds the chunk's
``dh.T @ x`` (a product with K = the chunk's rows, accumulated with beta = 1). For each shape
(``DxN``, the geglu suite's inputs, bf16):

- the two products alone, cuBLAS, as one GEMM and in C row chunks (the backward's calls), on a
  random dh: "dx C" and "dW C" (C = 1: the bench's floor products);
- the whole recompute fwd+bwd step (``geglu(..., recompute=True)``, autograd) with
  BWD_MAX_CHUNKS = C (1: dh in one piece), and the floor's three GEMMs; each step's peak
  memory above the inputs (a plain step, as the bench measures it; MiB).

Every call is a CUDA-graph replay timed by do_bench with the L2 flushed, in interleaved rounds;
medians over the rounds, us.
"""

import argparse

import torch

import fusedmlp.ops._common as common
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, peak_mib_above_current, write_record
from fusedmlp.bench.suites import glu as glu_suite
from fusedmlp.kernels.configs import GLU_BWD_BLOCK_M


def replay(fn):
    return capture_cuda_graph(fn)[0].replay


def row_ranges(m, chunks):
    """The backward's row ranges (``backward_row_chunks``, whole GLU_BWD_BLOCK_M blocks) for ``chunks`` chunks."""
    if chunks == 1:
        return [(0, m)]
    return common.backward_row_chunks(m, GLU_BWD_BLOCK_M, common.BWD_CHUNK_BYTES, common.cdiv(m, chunks))


def product_calls(d, n, plans):
    dh = torch.randn(n, 8 * d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8 * d, d, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    calls = {}
    for chunks in plans:
        ranges = row_ranges(n, chunks)

        def run_dx(ranges=ranges):
            for start, stop in ranges:
                torch.mm(dh[start:stop], w, out=dx[start:stop])

        def run_dw(ranges=ranges):
            for i, (start, stop) in enumerate(ranges):
                if i == 0:
                    torch.mm(dh[start:stop].t(), x[start:stop], out=dw)
                else:
                    dw.addmm_(dh[start:stop].t(), x[start:stop])

        calls[f"dx {chunks}"] = replay(run_dx)
        calls[f"dW {chunks}"] = replay(run_dw)
    return calls, (dh, w, x, dx, dw)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="2048x16384,1024x32768")
    parser.add_argument("--chunks", default="4,3,2,1")
    args = parser.parse_args()
    plans = [int(c) for c in args.chunks.split(",")]
    rows = []
    for text in args.shapes.split(","):
        d, n = (int(v) for v in text.split("x"))
        calls, keep = product_calls(d, n, [1] + plans)
        rows.append(interleaved_us_row(calls, args.rounds, shape=text, part="products"))
        del calls, keep
        torch.cuda.empty_cache()

        inputs, g = glu_suite._make_inputs((d, n), torch.bfloat16)
        fused = glu_suite._forward_fn("fused")
        step = lambda: torch.autograd.grad(fused(*inputs), inputs, g)  # noqa: E731
        saved = common.BWD_MAX_CHUNKS
        steps, peaks = {}, {}
        try:
            for chunks in plans:
                common.BWD_MAX_CHUNKS = chunks
                step()  # tuned before the peak is read and the capture made
                peaks[chunks] = peak_mib_above_current(step)
                steps[f"step {chunks}"] = replay(step)
        finally:
            common.BWD_MAX_CHUNKS = saved
        steps["floor"] = replay(glu_suite._gemm_steps(inputs, g)["fwd+bwd"])
        row = interleaved_us_row(steps, args.rounds, shape=text, part="steps")
        row["peak_mib"] = peaks
        row["step / floor"] = {name: row[name] / row["floor"] for name in steps if name != "floor"}
        print("  ", {k: round(v, 3) for k, v in row["step / floor"].items()}, "peak MiB", peaks, flush=True)
        rows.append(row)
        del steps
        torch.cuda.empty_cache()
    write_record("geglu_chunk_plans", chunks=args.chunks, rows=rows)


if __name__ == "__main__":
    main()
