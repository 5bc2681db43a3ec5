"""Activation functions and their derivatives, for use inside any kernel epilogue.

Every function takes the pre-activation ``z`` as a register tile (fp32 or fp64; callers
upcast 16-bit data first) and a ``tl.constexpr`` name, so the branch is resolved at compile
time and a kernel specialised for one activation carries no other code.

    identity      a(z) = z                               a'(z) = 1
    relu          a(z) = max(z, 0)                       a'(z) = [z > 0]
    squared_relu  a(z) = max(z, 0)^2                     a'(z) = 2 max(z, 0)
    gelu          a(z) = z Phi(z)   (erf form)           a'(z) = Phi(z) + z phi(z)
    gelu_tanh     a(z) = 0.5 z (1 + tanh(u))             a'(z) = s + 2 z s (1 - s) u'
                  u = c (z + 0.044715 z^3), c = sqrt(2/pi), s = sigmoid(2u), u' = c (1 + 3*0.044715 z^2)
    sigmoid       a(z) = s = 1 / (1 + e^-z)              a'(z) = s (1 - s)
    silu          a(z) = z s                             a'(z) = s (1 + z (1 - s))

``gelu_tanh`` uses the identity 0.5 (1 + tanh(u)) = sigmoid(2u): it needs no tanh, which is
not available without libdevice (absent under the Triton interpreter), and it avoids the
cancellation of ``1 + tanh(u)`` for large negative u.

The sigmoids are ``1 / (1 + 2^(-z log2 e))``: one base-2 exponential (a single hardware
instruction on GPUs) and one division (in the forward values of gelu_tanh and silu a single
reciprocal instruction: ``_reciprocal``), no branch on the sign of z. For very negative z the
power overflows to inf and the quotient is the correct 0; for very positive z it is 0 and the
quotient 1. Forward epilogues are bound by this arithmetic where K is short: the ping-pong
linear forward at 16384 x 512 -> 1792 with bias (bf16, H200) took 76.5 us with gelu_tanh in
the earlier form (``exp(-|z|)`` and a select on the sign), 63.9 with this one and 58.9 with
the identity (benchmarks/NOTES.md, "The ping-pong forward"). gelu_tanh's derivative is
``s + z s (1 - s) (D0 + D1 z^2)`` (D0 + D1 z^2 = 2u') from the same exponential: in the
recompute dh kernel, the form with u and u' as separate tiles gave the consumer 1.6 KB of
spill stores per thread (benchmarks/NOTES.md, "GEGLU's recompute dh as a ping-pong kernel").
"""

import triton
import triton.language as tl

from .launch import INTERPRET

# Names accepted by ``activation`` / ``activation_value_and_grad`` (host code validates against this).
ACTIVATIONS = ("identity", "relu", "squared_relu", "gelu", "gelu_tanh", "sigmoid", "silu")

# Globals read inside @triton.jit code must be tl.constexpr.
_INV_SQRT_2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
_LOG2E = tl.constexpr(1.4426950408889634)
# gelu_tanh(z) = z / (1 + 2^(z (K0 + K1 z^2))): -2u log2 e = z (K0 + K1 z^2)
_GELU_TANH_K0 = tl.constexpr(-2.302208198144325)
_GELU_TANH_K1 = tl.constexpr(-0.1029432395800235)
# its derivative: s + z s (1 - s) 2u', with 2u' = D0 + D1 z^2
_GELU_TANH_D0 = tl.constexpr(1.5957691216057308)
_GELU_TANH_D1 = tl.constexpr(0.21406444881780076)


# gelu's normal CDF in fp32: Phi(z) = erfc(-z / sqrt(2)) / 2 with, for u >= 0,
# erfc(u) = t exp(P(t) - u^2), t = 1 / (1 + u / 2): P of degree 9 fitted on Chebyshev nodes
# (benchmarks/gelu_erfc_fit.py; its largest error 1e-7, so erfc is right to about 1e-7 relative
# at every u). The coefficients below are P's times log2(e), for exp2, with the factor 1/2 of
# Phi folded into the constant term.
_ERFC_P = (-1.26551223, 1.00002368, 0.374091963, 0.0967841694, -0.186287998, 0.278867969, -1.13520388,
           1.48851582, -0.822152216, 0.170872777)
_PHI_Q0, _PHI_Q1, _PHI_Q2, _PHI_Q3, _PHI_Q4, _PHI_Q5, _PHI_Q6, _PHI_Q7, _PHI_Q8, _PHI_Q9 = (
    tl.constexpr(c * _LOG2E.value - (1.0 if power == 0 else 0.0)) for power, c in enumerate(_ERFC_P))
_HALF_INV_SQRT_2 = tl.constexpr(0.35355339059327373)
# fp32 reciprocals as one rcp.approx.ftz.f32 on GPUs (at most 1 ulp off; every divisor here is
# 1 + something >= 0, so no denormal input): ``/`` compiles to div.full.f32, whose range check
# adds a compare and two predicated multiplies per element, 3 of the 12 or so instructions per
# element of a gelu_tanh forward epilogue. Used where it shortened the code without spills
# (the forward values of gelu_tanh and silu, gelu's CDF); in ``_sigmoid`` and gelu_tanh's
# derivative it gave two of the ping-pong kernels 32-40 bytes of stack per thread
# (tests/test_linear_act.py and tests/test_glu.py compile them). The interpreter has no
# inline assembly: it divides.
_FAST_RECIPROCAL = tl.constexpr(not INTERPRET)


@triton.jit
def _reciprocal(d):
    """1 / d (fp32 on GPUs: rcp.approx.ftz.f32, and d = inf gives 0)."""
    if _FAST_RECIPROCAL and d.dtype == tl.float32:
        r = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [d], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = 1.0 / d
    return r


@triton.jit
def _normal_cdf(z):
    """Phi(z), the standard normal CDF (gelu(z) = z Phi(z)).

    fp64 tiles: 0.5 (1 + erf(z / sqrt(2))) through libdevice. fp32 tiles: the erfc form
    above, about 20 instructions and two MUFU operations per element where libdevice's erff
    selects between coefficient sets element by element (MOVs and FSELs: 3.6 thousand moves in
    the ping-pong linear forward's SASS). It also keeps Phi's relative accuracy where Phi is
    tiny: 1 + erf(z / sqrt(2)) cancels in fp32 (4% off at z = -5, 0 from z = -5.5). Largest
    relative error of z Phi(z) in fp32: 1.2e-6 for z >= -3, 3.1e-6 for z >= -5
    (gelu_erfc_fit.py).
    """
    if z.dtype == tl.float64:
        cdf = 0.5 * (1.0 + tl.erf(z * _INV_SQRT_2))
    else:
        t = _reciprocal(1.0 + tl.abs(z) * _HALF_INV_SQRT_2)
        q = _PHI_Q8 + t * _PHI_Q9
        q = _PHI_Q7 + t * q
        q = _PHI_Q6 + t * q
        q = _PHI_Q5 + t * q
        q = _PHI_Q4 + t * q
        q = _PHI_Q3 + t * q
        q = _PHI_Q2 + t * q
        q = _PHI_Q1 + t * q
        q = _PHI_Q0 + t * q
        half_erfc = t * tl.exp2(q - z * z * (0.5 * _LOG2E))  # erfc(|z| / sqrt(2)) / 2
        cdf = tl.where(z >= 0.0, 1.0 - half_erfc, half_erfc)
    return cdf


@triton.jit
def _sigmoid(z):
    # Written out rather than tl.sigmoid so that fp64 tiles stay fp64 (module docstring).
    return 1.0 / (1.0 + tl.exp2(z * -_LOG2E))


@triton.jit
def activation(z, ACT: tl.constexpr):
    """a(z) for the activation named ``ACT``."""
    if ACT == "identity":
        out = z
    elif ACT == "relu":
        out = tl.maximum(z, 0.0)
    elif ACT == "squared_relu":
        pos = tl.maximum(z, 0.0)
        out = pos * pos
    elif ACT == "gelu":
        out = z * _normal_cdf(z)
    elif ACT == "gelu_tanh":
        out = z * _reciprocal(1.0 + tl.exp2(z * (_GELU_TANH_K0 + _GELU_TANH_K1 * z * z)))
    elif ACT == "sigmoid":
        out = _sigmoid(z)
    else:
        tl.static_assert(ACT == "silu", "unknown activation")
        out = z * _reciprocal(1.0 + tl.exp2(z * -_LOG2E))
    return out


@triton.jit
def _ones_like(t):
    """Ones in t's shape, dtype and (in Gluon kernels) layout: ``tl.full`` takes no layout there,
    so a Gluon kernel with identity's derivative would not compile with it."""
    return tl.where(t == t, 1.0, 1.0).to(t.dtype)


@triton.jit
def activation_value_and_grad(z, ACT: tl.constexpr):
    """(a(z), a'(z)) for the activation named ``ACT``, sharing the transcendental work."""
    if ACT == "identity":
        value = z
        grad = _ones_like(z)
    elif ACT == "relu":
        value = tl.maximum(z, 0.0)
        grad = tl.where(z > 0.0, 1.0, 0.0).to(z.dtype)
    elif ACT == "squared_relu":
        pos = tl.maximum(z, 0.0)
        value = pos * pos
        grad = 2.0 * pos
    elif ACT == "gelu":
        cdf = _normal_cdf(z)
        value = z * cdf
        grad = cdf + z * _INV_SQRT_2PI * tl.exp(-0.5 * z * z)
    elif ACT == "gelu_tanh":
        z2 = z * z
        s = 1.0 / (1.0 + tl.exp2(z * (_GELU_TANH_K0 + _GELU_TANH_K1 * z2)))
        value = z * s
        grad = s + z * s * (1.0 - s) * (_GELU_TANH_D0 + _GELU_TANH_D1 * z2)
    elif ACT == "sigmoid":
        s = _sigmoid(z)
        value = s
        grad = s * (1.0 - s)
    else:
        tl.static_assert(ACT == "silu", "unknown activation")
        s = _sigmoid(z)
        value = z * s
        grad = s * (1.0 + z * (1.0 - s))
    return value, grad


# Activations whose derivative is a function of the output a(z): a backward may keep the
# layer's output (often saved anyway, as the next layer's input) instead of z.
DERIVATIVE_FROM_OUTPUT = ("identity", "relu", "squared_relu", "sigmoid")


@triton.jit
def activation_grad(a, ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr):
    """a'(z) from ``a`` = z, or, if FROM_OUTPUT, from ``a`` = a(z) (DERIVATIVE_FROM_OUTPUT only).

    From the output: relu' = [y > 0], squared_relu' = 2 sqrt(y), sigmoid' = y (1 - y).
    """
    if FROM_OUTPUT:
        if ACT == "identity":
            grad = _ones_like(a)
        elif ACT == "relu":
            grad = tl.where(a > 0.0, 1.0, 0.0).to(a.dtype)
        elif ACT == "squared_relu":
            grad = 2.0 * tl.sqrt(tl.maximum(a, 0.0))
        else:
            tl.static_assert(ACT == "sigmoid", "this activation's derivative needs z, not a(z)")
            grad = a * (1.0 - a)
    else:
        _, grad = activation_value_and_grad(a, ACT)
    return grad
