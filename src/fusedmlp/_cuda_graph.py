"""Capture of a step in a CUDA graph (the bench suites' graphed impls and ``dlrm train``'s
captured step), and the mode in which fusedmlp's ops pick kernels for replay."""

from __future__ import annotations

import contextlib

import torch

_graph_capture_depth = 0  # process-wide: autograd's worker threads run backwards that see it too


@contextlib.contextmanager
def graph_capture_mode():
    """Within this context fusedmlp's ops pick their kernels by GPU time alone, as for a step
    that is captured in a CUDA graph and replayed (where a launch costs no host time). Some ops
    otherwise trade GPU time for fewer launches where a plain call is bound by host time: the
    top MLP of DLRM (``fusedmlp.mlp``, eager mode, Hopper, 16 bits) runs its first layer as a
    kernel of its own from 512 rows here, from 32768 outside. Enter it for the warm-up calls
    and the capture alike, so that every kernel the capture launches was compiled and tuned
    before it; ``capture_cuda_graph`` does so. Results are the same either way, up to rounding."""
    global _graph_capture_depth
    _graph_capture_depth += 1
    try:
        yield
    finally:
        _graph_capture_depth -= 1


def in_graph_capture_mode() -> bool:
    """True inside ``graph_capture_mode``."""
    return _graph_capture_depth > 0


def capture_cuda_graph(fn, warmup: int = 3, after_warmup_call=None):
    """(graph, what the captured call of ``fn`` returned). ``fn`` runs ``warmup`` times first on
    a side stream (capture needs kernels compiled and allocations settled, off the capture
    stream), with ``after_warmup_call()`` after each of those calls; then once under capture.
    Warm-up and capture run in ``graph_capture_mode``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with graph_capture_mode():
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
