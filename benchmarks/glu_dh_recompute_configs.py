"""The GLU recompute dh kernel's ring depth and tile grouping on this GPU.

    PYTHONPATH=src python3 benchmarks/glu_dh_recompute_configs.py [--rounds 3] [--shapes 1024x32768,2048x16384]
                                                                 [--configs 4:16,5:16,4:8,5:8]

``GLU_DH_RECOMPUTE_PINGPONG_CONFIG`` (configs.py: 4 stages, GROUP_M 16) was chosen on an H200;
the GLU forward's alternating form, the same main loop, runs 5 stages and GROUP_M 8. For each
shape (``DxN``: the geglu suite's inputs, bf16, gelu_tanh with a bias) and each ``STAGES:GROUP_M``
(``ops.glu.GLU_DH_RECOMPUTE_PINGPONG_CONFIG`` replaced): the dh kernel alone on one backward
chunk's rows (``backward_row_chunks``: N / 4 rows here) and GEGLU's recompute fwd+bwd, with the
floor's three GEMMs. CUDA-graph replays, do_bench with the L2 flushed, interleaved rounds,
medians, us.
"""

import argparse

import torch

import fusedmlp.ops.glu as glu_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, write_record
from fusedmlp.bench.suites import glu as glu_suite
from fusedmlp.kernels.configs import GLU_BWD_BLOCK_M
from fusedmlp.ops._common import backward_row_chunks


def replay(fn):
    return capture_cuda_graph(fn)[0].replay


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="1024x32768,2048x16384")
    parser.add_argument("--configs", default="4:16,5:16,4:8,5:8")
    args = parser.parse_args()
    library = glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG
    rows = []
    for text in args.shapes.split(","):
        d, n = (int(v) for v in text.split("x"))
        inputs, g = glu_suite._make_inputs((d, n), torch.bfloat16)
        x, w, b = (t.detach() for t in inputs)
        out = w.shape[0] // 2
        start, stop = backward_row_chunks(n, GLU_BWD_BLOCK_M, 2 * out * x.element_size())[0]
        fused = glu_suite._forward_fn("fused")
        calls = {}
        try:
            for text_config in args.configs.split(","):
                stages, group_m = (int(v) for v in text_config.split(":"))
                glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG = dict(library, STAGES=stages, GROUP_M=group_m)
                dh = lambda: glu_ops.glu_backward_dh_impl(g[start:stop], x[start:stop], w[:out], w[out:],  # noqa: E731
                                                          b[:out], b[out:], None, "gelu_tanh")
                dh()
                calls[f"dh {text_config}"] = replay(dh)
                step = lambda: torch.autograd.grad(fused(*inputs), inputs, g)  # noqa: E731
                step()
                calls[f"step {text_config}"] = replay(step)
        finally:
            glu_ops.GLU_DH_RECOMPUTE_PINGPONG_CONFIG = library
        calls["floor"] = replay(glu_suite._gemm_steps(inputs, g)["fwd+bwd"])
        row = interleaved_us_row(calls, args.rounds, shape=text, chunk_rows=stop - start)
        row["step / floor"] = {name: row[name] / row["floor"] for name in calls if name.startswith("step ")}
        print("  ", {k: round(v, 3) for k, v in row["step / floor"].items()}, flush=True)
        rows.append(row)
        del calls
        torch.cuda.empty_cache()
    write_record("glu_dh_recompute_configs", configs=args.configs, rows=rows)


if __name__ == "__main__":
    main()
