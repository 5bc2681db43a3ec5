"""SwiGLU feed-forward (the LLaMA MLP): validation, autograd and the torch.library op.

    fusedmlp.swiglu(x, w_gate, w_up, w_down, *, recompute=False, activation="silu")
        z = silu(x @ w_gate.T) * (x @ w_up.T);  y = z @ w_down.T          (no biases)

    fusedmlp.swiglu_packed(x, w_gate_up, w_down, *, recompute=False, activation="silu")
        the same with w_gate_up = [w_gate; w_up] ([2*hidden, d], Phi-3's gate_up_proj)

Another gate activation (``activation``, any of kernels/activations.py: ``gelu_tanh`` gives
Gemma's GeGLU feed-forward) runs the same kernels with its own epilogue; below, silu stands
for whichever is chosen. The packed form runs them on the two halves of its weight (views)
and forms that weight's gradient in its layout (``_PackedSwiGLUFunction``): in eager calls
the dh kernels write dh's halves in the weight's [gate | up] order, so that gradient is one
product as well (two, one per half, took 1.16x its time at 16384 x 512 -> 1792 on an H200).

Forward: one GLU kernel (kernels/glu.py, ``act = silu``, W1 = up, W2 = gate) computes z
with one pass over x and both weights; the two products never reach memory. Then the down
projection runs on cuBLAS (its reduction runs over all of ``hidden``, so it cannot share
the tile).

Backward, with gy = dL/dy: the pair ``[d_up | d_gate] = [g * silu(gate) | g * up * silu'(gate)]``
of the down projection's input gradient ``g = gy @ w_down`` is formed by one fused kernel
(``glu_backward_dh``) and written once as ``dh [M, 2*hidden]``, together with ``z`` for
``dW_down = gy.T @ z``. With h kept (the default), on Hopper (16-bit, aligned) g is formed
on the tile of a warp-specialised kernel that reads h there (``glu_bwd_dh_rotating_kernel``,
three consumers taking turns on 128 x 64 tiles, up to d = 512; ``glu_bwd_dh_wide_pingpong_kernel``,
two on 128 x 128, beyond, except for a gelu (erf) gate, with which that kernel was 1.1-1.8x
slower than the stream: configs.py ``GLU_DH_WIDE_STREAM_ACTIVATIONS``);
elsewhere g is a cuBLAS product and the kernel streams g and h. With h recomputed, cuBLAS
recomputes h into the tensor dh then overwrites, and the same path follows (a Triton kernel
that formed g and both products on one tile took 1.10-1.15x its time at d = 1024-4096 on an
H200, and was removed: ops/glu.py ``_h_on_cublas``). Then cuBLAS: ``[dW_up; dW_gate] = dh.T @ x`` (one product);
and ``dx = d_up @ w_up + d_gate @ w_gate``: on Hopper (16-bit, TMA-readable, eager calls) one
ping-pong kernel with the gate product as its last K steps (kernels/linear_act.py's
``dgrad_pingpong_kernel``: dx rounded once; on an H100 0.93-0.97x the time of cuBLAS's two
products at 16384 and 65536 tokens, a tie at 8192 x 4096 -> 14336: configs.py
``DGRAD_PINGPONG_CONFIG``), elsewhere cuBLAS's mm, then addmm.

Memory of the backward with h kept, in eager mode: dh is written over h, and z (and g where
cuBLAS forms it, z then written over it) lies in memory that is dead at the time: the
``[dW_up; dW_gate]`` buffer, written only after the last chunk's z is used (each chunk's dh
stays in h's memory, and the pair and dx are then one product each over all rows; with the
weights frozen, or chunks taller than 2*d rows, the first chunk's z goes there and each later
one's in the previous chunk's h rows). Chunks are 2*d rows (so that one fits) whenever g for
all rows would exceed 256 MiB; so the backward allocates its gradients and nothing else
(d=4096, hidden=14336, 16384 tokens: two chunks). The price: such a graph can be
differentiated once (a second backward with ``retain_graph=True`` raises). In
recompute mode, and under torch.compile (custom ops do not mutate their inputs), dh, z (and
g) are new tensors, one row chunk at a time (up to 4 chunks when they would exceed 256 MiB).

Why two kernels for g on the tile when h is kept: a consumer holds g and buffers of its
tile's size for h's halves in and dh's halves and z out, which leaves room for 128 x 64 tiles;
at d = 2048 and beyond their main loop fell behind cuBLAS (benchmarks/NOTES.md, "SwiGLU's dh
with g on the tile"). The 128 x 128 kernel keeps three [128, 64] buffers per consumer and runs
its epilogue in two column halves; from d = 1024 it is the faster of the two, and against
cuBLAS's g plus the stream it saves 4.8-22% of the dh step (16384 tokens, H100 and H200;
benchmarks/NOTES.md, "SwiGLU's dh on 128 x 128 tiles"). At d = 512 the main loop is short
against each tile's epilogue, so three consumers take turns there (two buffers each, z out
over dh1's): 0.91-0.96x the time of two alternating consumers (H200; benchmarks/NOTES.md,
"The dh kernel at d = 512: what bounds it"). The Triton form of the same (with h
recomputed: three accumulators) ran at a fraction of cuBLAS's speed (d=512: 285 us against
41 us for the product plus about 70 for the stream).

Memory modes: ``recompute=False`` (default) keeps ``h = [up | gate]`` ([..., 2*hidden], as
eager PyTorch and torch.compile keep the two products) and the backward kernel reads it;
``recompute=True`` keeps only x and recomputes both products in the backward (two more GEMMs'
worth of work: about 11 instead of 9 hidden-sized products per step), into the memory that dh
then takes, so that it allocates no more than the store mode's backward.

fp32 at PyTorch's "highest" matmul precision and fp64 on a GPU run the gate and up products on
cuBLAS instead of the GLU kernel (ops/glu.py, ``gemms_on_cublas``).

Under torch.compile: ``fusedmlp::swiglu(x, w_gate, w_up, w_down, act, store_h) -> (y, h)`` with
its autograd registered; the backward calls ``fusedmlp::glu_backward_dh``.
"""

from __future__ import annotations

import functools

import torch

from ..kernels.configs import DGRAD_PINGPONG_CONFIG, GLU_BWD_BLOCK_M
from ..kernels.linear_act import dgrad_pingpong_kernel
from ._common import (
    autocast_dtype, backward_row_chunks, call_autocast, CallPlans, check_bool, check_linear_inputs,
    check_same_dtype_device, check_tensor, exact_key, grad_needed, kernel_backward, launch_pingpong, num_sms,
    pingpong_eligible, reuse_saved_once, scratch_matrix,
)
from .activations import activation_reference, check_activation
from .glu import glu_backward_dh, glu_backward_dh_impl, glu_forward_impl

__all__ = ["swiglu", "swiglu_packed", "swiglu_reference"]

# the input gradient's ping-pong launch, replayed by a training loop's repeated calls (CallPlans)
_dx_plans = CallPlans()


def swiglu_reference(x, w_gate, w_up, w_down, activation: str = "silu"):
    """Plain PyTorch: ``(act(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T``, act = silu by default."""
    linear = torch.nn.functional.linear
    return linear(activation_reference(linear(x, w_gate), check_activation(activation)) * linear(x, w_up), w_down)


def _forward_impl(x, w_gate, w_up, w_down, act, store_h):
    z, h = glu_forward_impl(x, w_up, w_gate, None, None, act, store_h)
    return z @ w_down.t(), h


def _backward(grad_y, x, w_gate, w_up, w_down, h, act, needs, traced, in_place=False, gate_first=False):
    """(dx, dW_gate, dW_up, dW_down, pair), None where not needed; rows walked in chunks.
    ``traced``: the formula runs under torch.compile's tracing (custom ops only).
    ``in_place``: dh is written over the stored h, and z (and g where cuBLAS forms it) goes
    where memory is dead (``_g_scratch``), so that the backward allocates its gradients only.
    ``pair``: with both weights wanted, the one ``[2*hidden, d]`` tensor of which dW_gate and
    dW_up are halves, formed by one product ``dh.T @ x`` in dh's column order: ``[dW_up;
    dW_gate]``, or with ``gate_first`` (eager calls only) ``[dW_gate; dW_up]``, the packed
    weight's order (``swiglu_packed``), for which the dh kernels write dh's halves swapped."""
    needs_x, needs_gate, needs_up, needs_down = needs
    if gate_first and traced:
        raise ValueError("gate_first is for eager calls: the traced dh op writes [d_up | d_gate]")
    hidden = w_up.shape[0]
    wants_pair = needs_gate and needs_up  # the pair as one [2*hidden, d] product
    grad_x = x.new_empty(x.shape) if needs_x else None
    grad_pair = x.new_empty((2 * hidden, x.shape[1])) if wants_pair else None
    grad_gate = grad_up = grad_down = None
    dh_of = functools.partial(glu_backward_dh_impl, x2_first=True) if gate_first else glu_backward_dh(traced)

    def accumulate(acc, a, b):  # acc + a @ b, summed over the chunks in a fixed order
        return a @ b if acc is None else acc.addmm_(a, b)

    def pair_product(dh_rows, x_rows, first):  # grad_pair (+)= dh_rows.T @ x_rows (dh's columns: grad_pair's rows)
        torch.mm(dh_rows.t(), x_rows, out=grad_pair) if first else grad_pair.addmm_(dh_rows.t(), x_rows)

    def up_and_gate(dh_rows):  # (d_up, d_gate): dh's halves in its order
        first, second = dh_rows[:, :hidden], dh_rows[:, hidden:]
        return (second, first) if gate_first else (first, second)

    if in_place:  # chunks of 2*d rows: a chunk's g fits in grad_pair (see _g_scratch)
        chunks = backward_row_chunks(x.shape[0], GLU_BWD_BLOCK_M, hidden * x.element_size(), 2 * x.shape[1])
    else:
        # dh, z (and g when h is kept; with h recomputed, a g that cuBLAS forms is not counted)
        transient = (3 if h is None else 4) * hidden * x.element_size()
        chunks = backward_row_chunks(x.shape[0], GLU_BWD_BLOCK_M, transient)
    # in place with the weight pair wanted and every chunk's z (and g) fitting in grad_pair's
    # memory, each chunk's dh stays in h's: the pair and dx are then one product each over all
    # rows, after the loop
    whole = in_place and wants_pair and max(stop - start for start, stop in chunks) <= 2 * x.shape[1]
    for index, (start, stop) in enumerate(chunks):
        rows = slice(start, stop)
        x_rows, gy = x[rows], grad_y[rows]
        if h is None:  # g = gy @ w_down on the fused kernel's tile, beside the recomputed products
            dh, _, z = dh_of(gy, x_rows, w_up, w_gate, None, None, None, act, w_down, needs_down)
        elif in_place:  # dh over h, z (and g where cuBLAS forms it) in dead memory
            dead = grad_pair if whole or index == 0 else h[slice(*chunks[index - 1])]
            z_out = _g_scratch(dead, stop - start, hidden, gy)
            dh, _, z = glu_backward_dh_impl(gy, x_rows, w_up, w_gate, None, None, h[rows], act, w_down,
                                            store_z=needs_down, in_place=True, z_out=z_out, x2_first=gate_first)
        else:  # the same, each output in its own tensor
            dh, _, z = dh_of(gy, x_rows, w_up, w_gate, None, None, h[rows], act, w_down, needs_down)
        d_up, d_gate = up_and_gate(dh)
        if needs_down:  # before grad_pair is written: z may lie in grad_pair's memory
            grad_down = accumulate(grad_down, gy.t(), z)
        if whole:
            del dh, z, d_up, d_gate
            continue
        if wants_pair:
            pair_product(dh, x_rows, index == 0)
        elif needs_up:
            grad_up = accumulate(grad_up, d_up.t(), x_rows)
        elif needs_gate:
            grad_gate = accumulate(grad_gate, d_gate.t(), x_rows)
        if needs_x:
            _input_grad(d_up, d_gate, w_up, w_gate, grad_x[rows], traced)
        del dh, z, d_up, d_gate  # one chunk's transients alive at a time
    if whole:  # h now holds dh for every row
        pair_product(h, x, True)
        if needs_x:
            _input_grad(*up_and_gate(h), w_up, w_gate, grad_x, traced)
    if grad_pair is not None:
        grad_up, grad_gate = grad_pair[:hidden], grad_pair[hidden:]
        if gate_first:
            grad_up, grad_gate = grad_gate, grad_up
    return grad_x, grad_gate, grad_up, grad_down, grad_pair


def _input_grad(d_up, d_gate, w_up, w_gate, out, traced):
    """``out = d_up @ w_up + d_gate @ w_gate`` ([M, d]; the weights as stored, [hidden, d]): one
    ping-pong kernel on Hopper in eager calls (the gate product as its tail K steps), else
    cuBLAS's two products. ``traced``: under torch.compile's tracing, where no kernel may launch.

    The kernel saves GPU time at every size measured and costs some host time (a launch with four
    descriptors against two ATen calls; H100 host, 16384 x 512 -> 1792: 84 against 55 us per
    call, medians of 7 rounds that spread 47-92 and 42-60). So a plain step that is the host's
    (small shapes: 1.2-1.4 ms of host against 0.54 of GPU there) pays that, while the same step
    replayed from a CUDA graph, as small shapes should run, gains (0.540 against 0.549 ms):
    benchmarks/results/swiglu_dgrad_dx_H100_2026-11-25/. A training loop's repeated calls
    replay the launch from a call plan (``_dx_plans``, ops/_common.py ``CallPlans``), without
    the layout checks and the launch's memo key: with the GLU's plans, the plain step at
    16384 x 512 -> 1792 took 0.66x the time without plans (H200, benchmarks/call_plans_host.py)."""
    if not traced:
        plan = tuple(map(exact_key, (d_up, d_gate, w_up, w_gate, out)))
        if _dx_plans.launch(plan):  # a training loop's repeated call
            return
        if pingpong_eligible(d_up, d_gate, w_up, w_gate, out):
            m, n = out.shape
            with _dx_plans.filing(plan):
                launch_pingpong(dgrad_pingpong_kernel, DGRAD_PINGPONG_CONFIG, m, n, num_sms(out),
                                {"a_desc": d_up, "tail_a_desc": d_gate}, {}, {"dx_desc": out},
                                {"w_kn_desc": w_up, "tail_w_kn_desc": w_gate},
                                M=m, N=n, K=w_up.shape[0], R=w_gate.shape[0])
            return
    torch.mm(d_up, w_up, out=out)
    out.addmm_(d_gate, w_gate)


def _g_scratch(dead, rows, hidden, like):
    """Where the in-place backward puts z (and g where cuBLAS forms it; [rows, hidden]):
    memory that holds nothing live yet or any more: grad_pair ([2*hidden, d], written only
    after the chunk's z is used: chunks of at most 2*d rows fit), or where the pair is not
    formed, for a later chunk, the previous chunk's h rows ([rows', 2*hidden], used up by
    then). Else a new tensor."""
    scratch = None if dead is None else scratch_matrix(dead, rows, hidden)
    return scratch if scratch is not None else like.new_empty((rows, hidden))


class _SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down, act, store_h):
        y, h = _forward_impl(x, w_gate, w_up, w_down, act, store_h)
        ctx.act = act
        ctx.save_for_backward(x, w_gate, w_up, w_down, h if store_h else None)
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, w_gate, w_up, w_down, h = ctx.saved_tensors
        in_place = reuse_saved_once(ctx, "fusedmlp.swiglu", h is not None)
        grads = _backward(grad_y, x, w_gate, w_up, w_down, h, ctx.act, ctx.needs_input_grad[:4], False, in_place)
        return (*grads[:4], None, None)


class _PackedSwiGLUFunction(torch.autograd.Function):
    """The same with the gate and up weights packed in one ``[2*hidden, d]`` tensor ``[gate; up]``
    (Phi-3's ``gate_up_proj``): its gradient is formed in that tensor's layout, not assembled
    from the halves' (autograd would zero-fill a full-size tensor per half and add them)."""

    @staticmethod
    def forward(ctx, x, w_gate_up, w_down, act, store_h):
        hidden = w_gate_up.shape[0] // 2
        y, h = _forward_impl(x, w_gate_up[:hidden], w_gate_up[hidden:], w_down, act, store_h)
        ctx.act = act
        ctx.save_for_backward(x, w_gate_up, w_down, h if store_h else None)
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, w_gate_up, w_down, h = ctx.saved_tensors
        in_place = reuse_saved_once(ctx, "fusedmlp.swiglu_packed", h is not None)
        needs_x, needs_pair, needs_down = ctx.needs_input_grad[:3]
        hidden = w_gate_up.shape[0] // 2
        grad_x, _, _, grad_down, grad_pair = _backward(
            grad_y, x, w_gate_up[:hidden], w_gate_up[hidden:], w_down, h, ctx.act,
            (needs_x, needs_pair, needs_pair, needs_down), False, in_place, gate_first=True)
        return grad_x, grad_pair, grad_down, None, None


@torch.library.custom_op("fusedmlp::swiglu", mutates_args=())
def _swiglu_op(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, act: str, store_h: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward_impl(x, w_gate, w_up, w_down, act, store_h)


@_swiglu_op.register_fake
def _(x, w_gate, w_up, w_down, act, store_h):
    m, hidden = x.shape[0], w_up.shape[0]
    return x.new_empty((m, w_down.shape[0])), x.new_empty((m, 2 * hidden) if store_h else (0,))


def _setup_context(ctx, inputs, output):
    x, w_gate, w_up, w_down, act, store_h = inputs
    ctx.act = act
    ctx.set_materialize_grads(False)  # h never receives a gradient: no zero tensor for it
    ctx.save_for_backward(x, w_gate, w_up, w_down, output[1] if store_h else None)


def _op_backward(ctx, grad_y, grad_h):
    if grad_y is None:
        return None, None, None, None, None, None
    x, w_gate, w_up, w_down, h = ctx.saved_tensors
    grads = _backward(grad_y, x, w_gate, w_up, w_down, h, ctx.act, ctx.needs_input_grad[:4], traced=True)
    return (*grads[:4], None, None)


torch.library.register_autograd("fusedmlp::swiglu", _op_backward, setup_context=_setup_context)


def _validate(x, w_gate, w_up, w_down):
    check_linear_inputs(x, w_gate, None, weight_name="w_gate")
    check_linear_inputs(x, w_up, None, weight_name="w_up")
    check_tensor(w_down, "w_down", ndim=2)
    check_same_dtype_device("x", x, w_down=w_down)
    if w_gate.shape != w_up.shape:
        raise ValueError(
            f"w_gate and w_up must have the same [hidden, dim] shape, got {tuple(w_gate.shape)} and {tuple(w_up.shape)}"
        )
    if w_down.shape[1] != w_up.shape[0]:
        raise ValueError(
            f"w_down must be [out, hidden] with hidden = {w_up.shape[0]} (rows of w_up), got {tuple(w_down.shape)}"
        )


def swiglu(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, recompute: bool = False,
    activation: str = "silu",
) -> torch.Tensor:
    """Fused SwiGLU feed-forward: ``(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T``.

    Args:
        x: ``[..., dim]`` input, any leading shape (e.g. ``(batch, seq, dim)``); fp16, bf16,
            fp32 or fp64; any strides.
        w_gate, w_up: ``[hidden, dim]`` weights of the gate and up projections (bias-free
            ``nn.Linear(dim, hidden)``, as in Hugging Face ``LlamaMLP``).
        w_down: ``[out, hidden]`` weight of the down projection (usually out = dim).
        recompute: False (default) keeps both hidden products for the backward, as eager
            PyTorch does, and the backward reuses their memory for the gradients (so it runs
            once per forward: ``retain_graph=True`` and a second backward raise); True keeps
            only x and recomputes them inside the backward kernel.
        activation: the gate's activation: ``silu`` (default, SwiGLU) or any other of
            ``fusedmlp.ACTIVATIONS``, e.g. ``gelu_tanh`` for the GeGLU feed-forward of Gemma
            models (``act(x @ w_gate.T) * (x @ w_up.T)``, the same kernels).

    Returns:
        ``[..., out]`` tensor of x's dtype; inside ``torch.autocast``, of the autocast dtype (tensor
        arguments cast as for ``F.linear``).
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(swiglu, dtype, x, w_gate, w_up, w_down, recompute=recompute, activation=activation)
    _validate(x, w_gate, w_up, w_down)
    check_bool(recompute, "recompute")
    act = check_activation(activation)
    return _dispatch(x, w_gate, w_up, w_down, act, recompute,
                     lambda x2d: _SwiGLUFunction.apply(x2d, w_gate, w_up, w_down, act, not recompute))


def _dispatch(x, w_gate, w_up, w_down, act, recompute, apply_eager):
    """The op on x's rows, validated arguments: inference keeps no hidden products; under
    torch.compile the custom op (a packed weight's halves are traced slices of it, whose
    gradients autograd meets there); otherwise ``apply_eager(x2d)``, the op's Function."""
    x2d = x.reshape(-1, x.shape[-1])
    if not grad_needed(x2d, w_gate, w_up, w_down):  # inference: the hidden products are not kept
        y = (torch.ops.fusedmlp.swiglu(x2d, w_gate, w_up, w_down, act, False) if torch.compiler.is_compiling()
             else _forward_impl(x2d, w_gate, w_up, w_down, act, False))[0]
    elif torch.compiler.is_compiling():
        y, _ = torch.ops.fusedmlp.swiglu(x2d, w_gate, w_up, w_down, act, not recompute)
    else:
        y = apply_eager(x2d)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], w_down.shape[0])


def swiglu_packed(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, *, recompute: bool = False,
    activation: str = "silu",
) -> torch.Tensor:
    """``swiglu`` with the gate and up weights packed in one tensor, as Phi-3's ``gate_up_proj``:
    ``(act(x @ w_gate_up[:hidden].T) * (x @ w_gate_up[hidden:].T)) @ w_down.T``.

    Args:
        x: ``[..., dim]`` input, as for ``swiglu``.
        w_gate_up: ``[2*hidden, dim]`` weight of a bias-free ``nn.Linear(dim, 2*hidden)``: the gate
            projection's rows first, then the up projection's.
        w_down: ``[out, hidden]`` weight of the down projection.
        recompute, activation: as for ``swiglu``.

    Returns:
        ``[..., out]``, as ``swiglu``. The same kernels run on the two halves (views, not copies);
        the backward writes w_gate_up's gradient as one tensor in its layout.
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(swiglu_packed, dtype, x, w_gate_up, w_down, recompute=recompute, activation=activation)
    check_linear_inputs(x, w_gate_up, None, weight_name="w_gate_up")
    if w_gate_up.shape[0] % 2:
        raise ValueError(f"w_gate_up must be [2*hidden, dim] (an even number of rows), got {tuple(w_gate_up.shape)}")
    hidden = w_gate_up.shape[0] // 2
    w_gate, w_up = w_gate_up[:hidden], w_gate_up[hidden:]
    _validate(x, w_gate, w_up, w_down)
    check_bool(recompute, "recompute")
    act = check_activation(activation)
    return _dispatch(x, w_gate, w_up, w_down, act, recompute,
                     lambda x2d: _PackedSwiGLUFunction.apply(x2d, w_gate_up, w_down, act, not recompute))
