"""Tensor parallelism for the gated feed-forward layers (``SwiGLU``, ``PackedSwiGLU``, ``GEGLU``) with DTensor.

``tensor_parallel(model, mesh)`` shards, over a 1-D device mesh of ``n`` ranks, every
``SwiGLU``, ``PackedSwiGLU`` and ``GEGLU`` in ``model`` (and every ``PatchedGEGLU``, the GEGLU that ``patch`` puts
in place of a diffusers-style block: its ``proj`` Linear holds the packed weight) the Megatron
way: the hidden units are split into ``n`` slices, each rank computes its slice with the fused
kernel and no activation crosses ranks inside the layer.

    SwiGLU   gate_proj.weight, up_proj.weight [hidden, d]  Shard(0): rank r holds rows r of n
             down_proj.weight [d_out, hidden]              Shard(1): the matching columns
             y = all_reduce_sum(swiglu(x, gate_r, up_r, down_r))
    PackedSwiGLU  gate_up_proj.weight [2*hidden, d] packs gate (rows [:hidden]) and up: rank r
             holds rows r of n of each half, packed again ([gate_r; up_r], as GEGLU's
             weight below); down_proj.weight Shard(1)
             y = all_reduce_sum(swiglu_packed(x, [gate_r; up_r], down_r))
    GEGLU    weight [2*out, d] packs x1 (rows [:out]) and x2 (rows [out:]) of one Linear. A plain
             row split would give rank 0 all of x1 and rank 1 all of x2: wrong, the gate must
             pair x1[j] with x2[j]. Here rank r holds rows r of n of x1 AND of x2, packed again
             ([x1_r; x2_r], a _StridedShard(0, split_factor=2) DTensor; the bias likewise), so
             its kernel computes y[:, slice r] = x1_r * gelu(x2_r).
             y = all_gather(y slices) along the last dim (GEGLU has no down projection)

The input ``x`` is replicated (every rank passes the same tensor). Its gradient is summed
over the ranks in the backward (each rank's kernel sees only its hidden slice). Parameters
stay DTensors: ``state_dict()`` holds DTensors whose ``full_tensor()`` is the unsharded
weight, optimizers update the local shards, and distributed checkpoints (DCP) save them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["tensor_parallel", "tensor_parallel_forward"]


class _CopyToRanks(torch.autograd.Function):
    """Identity forward; the backward sums the gradient over the ranks."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _SumOverRanks(torch.autograd.Function):
    """All-reduce (sum) forward; identity backward (the gradient is already replicated)."""

    @staticmethod
    def forward(ctx, y, group):
        y = y.contiguous()
        dist.all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherLastDim(torch.autograd.Function):
    """Forward: every rank's slice concatenated along the last dim; backward: this rank's slice."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.group, ctx.rank, ctx.width = group, dist.get_rank(group), y.shape[-1]
        parts = [torch.empty_like(y) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, y.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        start = ctx.rank * ctx.width
        return grad[..., start:start + ctx.width].contiguous(), None


def _local(t):
    return None if t is None else t.to_local()


def tensor_parallel_forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The forward of a ``SwiGLU``, ``PackedSwiGLU`` or ``GEGLU`` sharded by ``tensor_parallel``."""
    from ..ops.glu import geglu
    from ..ops.swiglu import swiglu, swiglu_packed

    group = module.tp_mesh.get_group()
    x = _CopyToRanks.apply(x, group)
    if hasattr(module, "gate_up_proj"):  # PackedSwiGLU
        y = swiglu_packed(x, _local(module.gate_up_proj.weight), _local(module.down_proj.weight),
                          recompute=module.recompute, activation=module.activation)
        return _SumOverRanks.apply(y, group)
    if hasattr(module, "down_proj"):  # SwiGLU
        y = swiglu(x, _local(module.gate_proj.weight), _local(module.up_proj.weight), _local(module.down_proj.weight),
                   recompute=module.recompute, activation=module.activation)
        return _SumOverRanks.apply(y, group)
    linear = _packed_linear(module)
    y = geglu(x, _local(linear.weight), _local(linear.bias), recompute=module.recompute, activation=module.activation)
    return _GatherLastDim.apply(y, group)


def _packed_linear(module: nn.Module) -> nn.Module:
    """The module holding a GEGLU's packed ``weight`` and ``bias``: a ``GEGLU`` itself, a
    ``PatchedGEGLU`` its ``proj`` Linear."""
    return getattr(module, "proj", module)


def _strided_shard():
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError as error:  # pragma: no cover - every supported PyTorch has it
        raise RuntimeError("GEGLU and PackedSwiGLU tensor parallelism need DTensor's _StridedShard placement "
                           "(PyTorch >= 2.5)") from error
    return _StridedShard(0, split_factor=2)


def _distribute(param: nn.Parameter, mesh, placement) -> nn.Parameter:
    from torch.distributed.tensor import distribute_tensor

    return nn.Parameter(distribute_tensor(param.detach(), mesh, [placement]), requires_grad=param.requires_grad)


def tensor_parallel(model: nn.Module, mesh) -> list[str]:
    """Shard every ``SwiGLU``, ``PackedSwiGLU``, ``GEGLU`` and ``PatchedGEGLU`` of ``model`` (in place) over
    the 1-D DeviceMesh ``mesh``; returns the names of the sharded modules.

    Every rank must call it with the same (replicated) weights, and the hidden width (SwiGLU,
    PackedSwiGLU) or output width (GEGLU) must divide by the mesh size. Afterwards pass the same input on
    every rank; the output is replicated.
    """
    from torch.distributed.tensor import Shard

    from .glu import GEGLU
    from .patch import PatchedGEGLU
    from .swiglu import PackedSwiGLU, SwiGLU

    if mesh.ndim != 1:
        raise ValueError(f"tensor_parallel takes a 1-D device mesh, got {mesh.ndim} dimensions")
    ranks = mesh.size()
    sharded = []
    for name, module in model.named_modules():
        name = name or type(module).__name__
        if getattr(module, "tp_mesh", None) is not None:
            raise ValueError(f"{name} is already tensor-parallel")
        if isinstance(module, (SwiGLU, PackedSwiGLU)):
            hidden = module.down_proj.weight.shape[1]
            if hidden % ranks:
                raise ValueError(f"{name}: hidden width {hidden} does not divide by the mesh size {ranks}")
            if isinstance(module, SwiGLU):
                module.gate_proj.weight = _distribute(module.gate_proj.weight, mesh, Shard(0))
                module.up_proj.weight = _distribute(module.up_proj.weight, mesh, Shard(0))
            else:  # [gate_r; up_r] on rank r
                module.gate_up_proj.weight = _distribute(module.gate_up_proj.weight, mesh, _strided_shard())
            module.down_proj.weight = _distribute(module.down_proj.weight, mesh, Shard(1))
        elif isinstance(module, (GEGLU, PatchedGEGLU)):
            linear = _packed_linear(module)
            out = linear.weight.shape[0] // 2
            if out % ranks:
                raise ValueError(f"{name}: out_features {out} does not divide by the mesh size {ranks}")
            linear.weight = _distribute(linear.weight, mesh, _strided_shard())
            if linear.bias is not None:
                linear.bias = _distribute(linear.bias, mesh, _strided_shard())
        else:
            continue
        module.tp_mesh = mesh
        sharded.append(name)
    return sharded
