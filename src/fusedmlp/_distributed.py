"""Collectives shared by the data-parallel pieces (the embedding exchange, DLRM metrics)."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

# all_gather_single is the newer name (PyTorch 2.13 deprecates all_gather_into_tensor)
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def world_size(group=None) -> int:
    """Ranks in ``group`` (1 when torch.distributed is not initialised)."""
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def exit_rank(code: int) -> None:
    """End a torchrun rank now, after its process group is destroyed and its output written:
    flush stdout and stderr, then ``os._exit(code)``, skipping the interpreter's teardown.

    Why: a gloo worker thread drops its reference to a finished collective's tensors a moment
    after the caller's ``wait`` returns, and dropping a tensor that has a Python object takes
    the GIL. If the main thread has reached ``Py_Finalize`` by then, the worker thread is
    killed inside a destructor and the process aborts ("terminate called without an active
    exception", SIGABRT): seen in 2 of about 160 two-rank runs on a loaded 2-core machine (none in
    120 with this exit; benchmarks/results/gloo_exit_abort_cpu_2026-11-22.txt), with the
    backtrace ``ProcessGroupGloo::runLoop`` -> ``~AsyncAllreduceWork`` -> ``decref`` ->
    ``take_gil`` -> ``pthread_exit``. Nothing is left to do at that point, so skipping the
    teardown loses nothing.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def gather_padded(tensor: torch.Tensor, pad_value, group=None,
                  longest: int | None = None) -> tuple[torch.Tensor, int]:
    """Every rank's ``tensor`` stacked along dim 0 in rank order, each padded with ``pad_value``
    to the longest: ``(out [world * longest, ...], longest)``.

    The lengths are exchanged first (one small collective and a host sync) unless ``longest``
    is given (the value a previous call returned for tensors of the same lengths), and except
    while a CUDA graph is being captured, where host syncs are not allowed: there every rank
    must pass the same length (a captured step has a fixed batch).
    """
    world = world_size(group)
    length = tensor.shape[0]
    if world == 1:
        return tensor, length
    if longest is None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        longest = length
    elif longest is None:
        lengths = torch.zeros(world, dtype=torch.int64, device=tensor.device)
        _all_gather(lengths, torch.tensor([length], dtype=torch.int64, device=tensor.device),
                    group=group)
        longest = int(lengths.max())
    if longest > length:
        pad = tensor.new_full((longest - length,) + tuple(tensor.shape[1:]), pad_value)
        tensor = torch.cat([tensor, pad])
    out = tensor.new_empty((world * longest,) + tuple(tensor.shape[1:]))
    _all_gather(out, tensor.contiguous(), group=group)
    return out, longest
