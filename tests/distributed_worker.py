"""One rank of the multi-process checks of tests/test_distributed.py (run by torchrun).

    torchrun --nproc-per-node N tests/distributed_worker.py CASE DEVICE

CASE: ddp | fsdp | fsdp_checkpoint | fsdp_mixed | tp. Each fused module is wrapped per CASE,
run on this rank's share of a batch (tp: on the whole batch, sharded weights), and its
output and every gradient are compared with the same module unwrapped in one process on the
whole batch, in float64 (fsdp_mixed: bf16 compute against float64). Failures are raised, so
torchrun's exit status is the verdict; rank 0 prints one line per module checked.
"""

import copy
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import rel_err  # noqa: E402

import fusedmlp  # noqa: E402
from fusedmlp._distributed import exit_rank  # noqa: E402
from fusedmlp.nn.patch import PatchedGEGLU  # noqa: E402

CASES = ("ddp", "fsdp", "fsdp_checkpoint", "fsdp_mixed", "tp")


def modules(device, dtype):
    """(name, module, input feature shape) for every fused module, seeded identically on all ranks."""
    torch.manual_seed(1234)
    factory = {"device": device, "dtype": dtype}
    lora = fusedmlp.LoRALinear(24, 32, r=4, alpha=8, **factory)
    torch.nn.init.normal_(lora.lora_B["default"].weight)  # zero-initialised: give dA something to carry
    return [
        ("GEGLU", fusedmlp.GEGLU(24, 16, **factory), (24,)),
        # patch's stand-in for a diffusers-style block: the packed weight in its proj Linear
        ("PatchedGEGLU", PatchedGEGLU(torch.nn.Linear(24, 32, **factory), activation="gelu_tanh"), (24,)),
        ("SwiGLU", fusedmlp.SwiGLU(24, 32, **factory), (3, 24)),  # 3-D input: (batch, L, d)
        ("PackedSwiGLU", fusedmlp.PackedSwiGLU(24, 32, activation="gelu_tanh", **factory), (3, 24)),
        ("FusedLinear", fusedmlp.FusedLinear(24, 32, activation="gelu_tanh", **factory), (24,)),
        ("LoRALinear", lora, (24,)),
        ("FusedMLP", fusedmlp.FusedMLP([13, 40, 24, 8], activation="relu", last_activation="sigmoid", **factory),
         (13,)),
    ]


def inputs(world, rows, feature_shape, device, dtype):
    """The whole batch's x and output-gradient weights g (the same on every rank)."""
    generator = torch.Generator().manual_seed(99)
    x = torch.randn(world * rows, *feature_shape, generator=generator, dtype=torch.float64)
    return x.to(device=device, dtype=dtype)


def reference(module, x, g):
    """Output and gradients of the unwrapped module on the whole batch, loss = sum(y * g) / world."""
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = module(x)
    (y * g).sum().backward()
    return y.detach(), x.grad, {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def _gather_strided_rows(t):
    """The full tensor of a _StridedShard(0, split_factor=2) DTensor from its local shards: each
    rank holds [first half's slice r; second half's slice r]. (PyTorch 2.11's full_tensor()
    cannot redistribute this placement; 2.13's can.)"""
    local = t.to_local().contiguous()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    half = local.shape[0] // 2
    return torch.cat([p[:half] for p in parts] + [p[half:] for p in parts])


def full(t):
    if not hasattr(t, "full_tensor"):
        return t
    placement = t.placements[0]
    if type(placement).__name__ == "_StridedShard" and torch.__version__ < "2.13":
        return _gather_strided_rows(t)
    return t.full_tensor()


def check(failures, name, what, got, want, bound):
    err = rel_err(full(got).double(), full(want).double())
    if not err < bound:
        failures.append(f"{name} {what}: relative error {err:.3e} >= {bound:.1e}")


def run(case: str, device: str) -> list[str]:
    from torch.distributed.device_mesh import init_device_mesh

    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh(device.split(":")[0], (world,))
    compute = torch.float64
    bound = 1e-10
    lines = []
    for name, module, shape in modules(device, torch.float64):
        rows = 6
        x_all = inputs(world, rows, shape, device, torch.float64)
        g_all = torch.randn_like(module(x_all).detach(), dtype=torch.float64)  # same seed on every rank
        ref = copy.deepcopy(module)
        if case == "fsdp_mixed":  # the reference runs the bf16 weights and inputs, in float64
            with torch.no_grad():
                for p in ref.parameters():
                    p.copy_(p.to(torch.bfloat16))
            x_ref = x_all.to(torch.bfloat16).double()
            bound = 3e-2
        else:
            x_ref = x_all
        scale = 1.0 if case == "tp" else 1.0 / world  # data parallel: DDP and FSDP average the ranks' gradients
        y_ref, dx_ref, grads_ref = reference(ref, x_ref, g_all * scale)

        if case == "tp":
            if name not in ("GEGLU", "PatchedGEGLU", "SwiGLU", "PackedSwiGLU"):
                continue
            if fusedmlp.tensor_parallel(module, mesh) != [name]:
                raise AssertionError(f"{name}: tensor_parallel did not shard it")
            x, g = x_all, g_all
        else:
            share = slice(rank * rows, (rank + 1) * rows)
            x, g = x_all[share], g_all[share]
            if case == "ddp":
                from torch.nn.parallel import DistributedDataParallel

                module = DistributedDataParallel(module)
            else:
                from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

                policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                    if case == "fsdp_mixed" else MixedPrecisionPolicy()
                fully_shard(module, mesh=mesh, mp_policy=policy)
        x = x.detach().clone().requires_grad_(True)
        if case == "fsdp_checkpoint":
            from torch.utils.checkpoint import checkpoint

            y = checkpoint(module, x, use_reentrant=False)
        else:
            y = module(x)
        (y.to(compute) * g).sum().backward()
        failures = []
        want_y = y_ref if case == "tp" else y_ref[rank * rows:(rank + 1) * rows]
        check(failures, name, "y", y, want_y, bound)
        want_dx = dx_ref if case == "tp" else dx_ref[rank * rows:(rank + 1) * rows]
        check(failures, name, "dx", x.grad, want_dx * (1.0 if case == "tp" else world), bound)
        inner = module.module if case == "ddp" else module
        for pname, p in inner.named_parameters():
            if pname not in grads_ref:
                if p.grad is not None:
                    failures.append(f"{name}.{pname}: a gradient for a frozen parameter")
                continue
            check(failures, name, f"d{pname}", p.grad, grads_ref[pname], bound)
        if case == "tp":  # the sharded weights' full tensors are the unsharded ones: state dicts match
            for key, value in module.state_dict().items():
                check(failures, name, f"state_dict[{key}]", value, ref.state_dict()[key], 1e-15)
        if failures:
            raise AssertionError(f"{case}: " + "; ".join(failures))
        lines.append(f"{case} {name}: output, dx and {len(grads_ref)} parameter gradients match")
    if case == "tp":
        for bad in (fusedmlp.SwiGLU(24, 31, device=device), fusedmlp.PackedSwiGLU(24, 31, device=device),
                    fusedmlp.GEGLU(24, 15, device=device)):
            try:
                fusedmlp.tensor_parallel(bad, mesh)
            except ValueError as error:
                lines.append(f"tp {type(bad).__name__} with an odd width: ValueError ({error})")
            else:
                raise AssertionError(f"{type(bad).__name__} with a width that does not divide: no error")
    return lines


def main():
    case, device = sys.argv[1], sys.argv[2]
    if case not in CASES:
        raise SystemExit(f"case must be one of {CASES}")
    if device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    try:
        lines = run(case, device)
        dist.barrier()  # no rank tears the group down while another is still in a collective
    finally:
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        print("\n".join(lines))
    exit_rank(0)  # every check has run; see exit_rank for the teardown race it avoids


if __name__ == "__main__":
    main()
