"""Capture of a step in a CUDA graph (the bench suites' graphed impls and ``dlrm train --cuda-graph``)."""

from __future__ import annotations

import torch


def capture_cuda_graph(fn, warmup: int = 3, after_warmup_call=None):
    """(graph, what the captured call of ``fn`` returned). ``fn`` runs ``warmup`` times first on
    a side stream (capture needs kernels compiled and allocations settled, off the capture
    stream), with ``after_warmup_call()`` after each of those calls; then once under capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
            if after_warmup_call is not None:
                after_warmup_call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result
