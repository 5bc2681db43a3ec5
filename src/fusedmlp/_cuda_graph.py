"""Capture of a step in a CUDA graph (the bench suites' graphed impls and ``dlrm train``'s
captured step), and the mode in which fusedmlp's ops pick kernels for replay."""

from __future__ import annotations

import contextlib
import gc

import torch

_graph_capture_depth = 0  # process-wide: autograd's worker threads run backwards that see it too


@contextlib.contextmanager
def graph_capture_mode():
    """Within this context fusedmlp's ops pick their kernels by GPU time alone, as for a step
    that is captured in a CUDA graph and replayed (where a launch costs no host time). Some ops
    otherwise trade GPU time for fewer launches where a plain call is bound by host time: the
    top MLP of DLRM (``fusedmlp.mlp``, eager mode, Hopper, 16 bits) runs its first layer as a
    kernel of its own from 512 rows here, from 32768 outside, and its weight gradients as cuBLAS
    products from 16384 rows here, never outside. Enter it for the warm-up calls
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


# a cause of cudaErrorStreamCaptureInvalidated found on PyTorch 2.11 (benchmarks/NOTES.md, "A
# capture after reduce-overhead steps"): PyTorch's own steps fail the same way, in either capture
# error mode, and new tensors on the same memory are enough to avoid it
CAPTURE_INVALIDATED_NOTE = (
    "fusedmlp.capture_cuda_graph: one known cause of this error is a step that differentiates "
    "leaf tensors which a torch.compile(mode=\"reduce-overhead\") step has differentiated and "
    "replayed before in this process (PyTorch's own steps fail the same way). Capture before any "
    "such step runs, or differentiate new leaves on the same memory instead: "
    "leaf.detach().requires_grad_().")


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, or the note appended to its message before Python 3.11."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.args = (f"{error.args[0] if error.args else ''}\n{note}",) + error.args[1:]


def capture_cuda_graph(fn, warmup: int = 3, after_warmup_call=None):
    """(graph, what the captured call of ``fn`` returned). ``fn`` runs ``warmup`` times first on
    a side stream (capture needs kernels compiled and allocations settled, off the capture
    stream), with ``after_warmup_call()`` after each of those calls; then once under capture.
    Warm-up and capture run in ``graph_capture_mode``, and with ``torch.autocast``'s cache of
    cast weights off (autocast blocks inside ``fn`` that do not say otherwise take the
    setting): with it on, inside an autocast block around this call, the capture would read
    the copies the warm-up cached, which the cache frees when that block exits, and replays
    would read freed memory (PyTorch's CUDA-graph notes say to turn the cache off). The
    graph then casts the weights itself on each replay, as fusedmlp's ops always do. Python's
    garbage collector runs just before the capture and not during it: a collection inside the
    capture can free objects whose finalizers call CUDA (PyTorch's own capture no longer
    collects first by default), which invalidates the capture; on an H100 the first capture of
    a fused MLP step under autocast in a process failed that way in 4 of 4 bench runs
    ("operation would make the legacy stream depend on a capturing blocking stream"), and
    passed in 3 of 3 with this. An invalidated capture raises PyTorch's error with a note on
    the other cause known (``CAPTURE_INVALIDATED_NOTE``)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    cache_before = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        with graph_capture_mode():
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    fn()
                    if after_warmup_call is not None:
                        after_warmup_call()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            gc.collect()
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                with torch.cuda.graph(graph):
                    result = fn()
            except RuntimeError as error:  # torch.AcceleratorError among them
                if "cudaErrorStreamCaptureInvalidated" in str(error):
                    _add_note(error, CAPTURE_INVALIDATED_NOTE)
                raise
            finally:
                if gc_was_enabled:
                    gc.enable()
    finally:
        torch.set_autocast_cache_enabled(cache_before)
    return graph, result
