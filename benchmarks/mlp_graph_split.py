"""The top DLRM MLP's step captured in a CUDA graph, with layer 0 split off (as
``graph_capture_mode`` runs it from FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED rows) and as one kernel,
in one process (one Hopper GPU, bf16).

    python benchmarks/mlp_graph_split.py

367-512-256-1 (ReLU, ReLU, sigmoid) through ``fusedmlp.mlp`` with the inputs and captured
steps of ``fusedmlp bench mlp``'s fused_graph impl (``fwd``: the training forward; ``fwd+bwd``:
forward and every gradient), timed as the bench times them (median of CUDA-event-timed
replays, L2 flushed before each). Prints microseconds per replay by row count.
"""
import torch

from fusedmlp.bench.harness import median_ms
from fusedmlp.bench.suites.mlp import _forward_fn, _graph_steps, _make_inputs
from fusedmlp.ops import mlp as M

for rows in (2048, 4096, 8192, 16384):
    shape = (rows, 367, 512, 256, 1)
    inputs, g = _make_inputs(shape, torch.bfloat16)
    times = {}
    for path, min_rows in (("split", 2048), ("whole", 2**62)):
        M.FIRST_LAYER_GEMM_MIN_ROWS_GRAPHED = min_rows
        for mode, replay in _graph_steps(_forward_fn(shape)("fused"), inputs, g).items():
            times[(mode, path)] = median_ms(replay) * 1e3
    print(rows, " ".join(f"{mode}/{path}={us:.1f}us" for (mode, path), us in sorted(times.items())), flush=True)
