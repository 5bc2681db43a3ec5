"""Collectives shared by the data-parallel pieces (the embedding exchange, DLRM metrics)."""

from __future__ import annotations

import importlib.util
import math
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


def agreed_length(length: int, device, group=None, longest: int | None = None) -> int:
    """The longest of the ranks' list lengths: ``longest`` if given (the value an earlier call
    returned for lists of the same lengths); else ``length`` itself while a CUDA graph is being
    captured, where host syncs are not allowed and every rank must pass the same length (a
    captured step has a fixed batch); else one small all-gather of the lengths (on ``device``,
    where the group's backend exchanges) and a host sync."""
    if longest is not None:
        return longest
    world = world_size(group)
    if world == 1 or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return length
    lengths = torch.zeros(world, dtype=torch.int64, device=device)
    _all_gather(lengths, torch.tensor([length], dtype=torch.int64, device=device), group=group)
    return int(lengths.max())


def gather_padded(tensor: torch.Tensor, pad_value, group=None,
                  longest: int | None = None) -> tuple[torch.Tensor, int]:
    """Every rank's ``tensor`` stacked along dim 0 in rank order, each padded with ``pad_value``
    to the longest: ``(out [world * longest, ...], longest)``, through the group's backend
    (NCCL's all-gather on GPUs). ``longest``: as ``agreed_length``'s."""
    world = world_size(group)
    length = tensor.shape[0]
    if world == 1:
        return tensor, length
    longest = agreed_length(length, tensor.device, group, longest)
    if longest > length:
        pad = tensor.new_full((longest - length,) + tuple(tensor.shape[1:]), pad_value)
        tensor = torch.cat([tensor, pad])
    out = tensor.new_empty((world * longest,) + tuple(tensor.shape[1:]))
    _all_gather(out, tensor.contiguous(), group=group)
    return out, longest


# "copy_engine": same-shaped lists exchanged through symmetric memory where that works (below);
# "nccl": always through the process group's all-gather.
EXCHANGE_ENV = "FUSEDMLP_EXCHANGE"


class PeerGather:
    """An all-gather of same-shaped per-rank lists through symmetric memory, on one host's GPUs.

    Every rank holds one buffer laid out as the gathered array ``[world * length, *row]``, mapped
    into every other rank's address space (``torch.distributed._symmetric_memory``). A rank
    writes its own list straight into its slot (``writable()``: rows ``rank * length ...``);
    ``gather()`` then copies the slot into the same rows of every other rank's buffer and waits
    until every rank has done so (a barrier on the GPU). The copies are device-to-device
    copies, which the copy engines carry over NVLink without taking any SMs. Why: in DLRM's
    data-parallel step the exchange of the tables' gradient sums sits on the step's critical
    path while the dense backward saturates the SMs, and NCCL's all-gather is a kernel that
    needs SMs. For the 18 MB per rank of 65536-row steps, replayed from a CUDA graph on 2 x
    H200: NCCL 104 us, these copies 71 (`benchmarks/exchange_paths.py`; each rank pulling the
    others' slots instead, ``PUSH = False``, took 69: the same).

    A rank's rows in another rank's buffer are written again only once that rank is done with
    its gathered array: ``writable()`` waits for every rank to reach it (a second barrier) when a
    gather came before, so the wait falls where the next list is made, not between a gather and
    its users. The result is the buffer itself, valid until this rank's next ``writable()``,
    before which its users must have run on the stream the gather ran on or after it (the
    embedding update's plan and update run in that order on one stream, and each lookup waits
    for the previous update). ``busy`` marks an object handed out and not yet released.
    """

    def __init__(self, group, length: int, row_shape: tuple, dtype: torch.dtype, device: torch.device):
        import torch.distributed._symmetric_memory as symm_mem

        self.world, self.rank = world_size(group), dist.get_rank(group)
        self.length, self.row_shape, self.dtype = length, tuple(row_shape), dtype
        shape = (self.world * length,) + self.row_shape
        numel = self.world * length * math.prod(self.row_shape)
        buffer = symm_mem.empty(max(1, numel * dtype.itemsize), dtype=torch.uint8, device=device)
        self._handle = symm_mem.rendezvous(buffer, group)  # collective: every rank makes its buffer here
        self._buffer = buffer
        self.gathered = self._handle.get_buffer(self.rank, shape, dtype)
        self._slot = self.gathered[self.rank * length:(self.rank + 1) * length]
        # this rank's slot, and where it goes in each other rank's buffer
        self._sends = [self._handle.get_buffer(peer, shape, dtype)[self.rank * length:(self.rank + 1) * length]
                       for peer in range(self.world) if peer != self.rank]
        self._receives = [(self.gathered[peer * length:(peer + 1) * length],
                           self._handle.get_buffer(peer, shape, dtype)[peer * length:(peer + 1) * length])
                          for peer in range(self.world) if peer != self.rank]
        self._being_read = False
        self.busy = False

    def writable(self) -> torch.Tensor:
        """This rank's slot ``[length, *row]``, to write its list into."""
        if self._being_read:
            self._handle.barrier(channel=0)
            self._being_read = False
        return self._slot

    def gather(self) -> torch.Tensor:
        """Every rank's list, ``[world * length, *row]`` in rank order."""
        # contiguous, same dtype: each copy a cudaMemcpyAsync, which the copy engines carry
        if PUSH:
            for remote in self._sends:
                remote.copy_(self._slot)
            self._handle.barrier(channel=0)
        else:
            self._handle.barrier(channel=0)
            for local, remote in self._receives:
                local.copy_(remote)
        self._being_read = True
        return self.gathered


# gather() pushes this rank's slot to the others (its copies start as soon as its own list is
# ready); False: it waits for every rank's list, then pulls theirs. The same speed, measured.
PUSH = True


def _copy_engine_possible(group, device: torch.device) -> bool:
    """Whether ``peer_gather`` may use symmetric memory: the same answer on every rank (a
    rank that allocated while another fell back would hang the group)."""
    if os.environ.get(EXCHANGE_ENV, "copy_engine") != "copy_engine":
        return False
    if device.type != "cuda" or world_size(group) == 1 or dist.get_backend(group) != "nccl":
        return False
    # one host: symmetric memory maps the peers' memory over NVLink / PCIe, not across hosts
    if int(os.environ.get("LOCAL_WORLD_SIZE", "-1")) != dist.get_world_size():
        return False
    return importlib.util.find_spec("torch.distributed._symmetric_memory") is not None


def peer_gather(cache: dict, tag: str, group, length: int, row_shape: tuple, dtype: torch.dtype,
                device) -> PeerGather | None:
    """A ``PeerGather`` for lists of ``length`` rows of ``row_shape`` (every rank must pass the
    same: ``agreed_length``), from ``cache`` (the caller's dict: one object per tag and shape,
    kept for the cache's life, since a captured CUDA graph may copy into it on every replay)
    and marked busy; give it back with ``release``. None where the exchange must go through
    ``gather_padded`` instead: one process, not on GPUs, ``FUSEDMLP_EXCHANGE=nccl``, ranks on
    several hosts, the object still busy (two lists of one tag and shape alive at once), or a
    new one needed while a CUDA graph is being captured (allocation is not allowed there; the
    warm-up steps before a capture make them). Every rank gets the same answer: all of these
    follow from what every rank runs."""
    device = torch.device(device)
    if not _copy_engine_possible(group, device):
        return None
    key = (tag, length, tuple(row_shape), dtype)
    exchange = cache.get(key)
    if exchange is None:
        if torch.cuda.is_current_stream_capturing():
            return None
        cache[key] = exchange = PeerGather(group, length, row_shape, dtype, device)
    if exchange.busy:
        return None
    exchange.busy = True
    return exchange


def release(*exchanges: PeerGather | None) -> None:
    for exchange in exchanges:
        if exchange is not None:
            exchange.busy = False
