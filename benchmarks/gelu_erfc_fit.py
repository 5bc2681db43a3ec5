"""The polynomial behind the fp32 normal CDF of ``gelu`` (kernels/activations.py), and its error.

    python benchmarks/gelu_erfc_fit.py        (CPU; prints the coefficients and the errors)

For u >= 0 write erfc(u) = t * exp(P(t) - u^2) with t = 1 / (1 + u / 2), so that
P(t) = ln(erfc(u) / t) + u^2 is smooth on t in (0, 1] (t -> 0 as u -> inf, where P -> ln(1 / (2
sqrt(pi)))). A least-squares fit of P on Chebyshev nodes of degree 9 (written below in powers
of t) gives erfc, and so Phi(z) = erfc(-z / sqrt(2)) / 2, with a relative error of about 1e-7
at every z: no cancellation where Phi is tiny (z << 0), unlike 0.5 (1 + erf(z / sqrt(2))).

The script refits, prints the coefficients, the fit's largest error in P (fp64), and the
largest relative error of gelu(z) = z Phi(z) evaluated in fp32 the way the kernels do it
(numpy float32, exp2 and division exact to fp32) against the fp64 erf form, over z in
[-5, 12] and [-12, 12] (far out, the rounding of z^2 in the exponent grows the error to
about 1e-5 of values below 1e-20). The GPU's ex2.approx and division add a few fp32 ulps.
"""

import math

import numpy as np
from numpy.polynomial import chebyshev, polynomial

DEGREE = 9


def p_exact(t):
    """ln(erfc(u) / t) + u^2 at u = 2 (1 - t) / t (an asymptotic series where erfc underflows)."""
    u = 2.0 * (1.0 - t) / t
    if u < 25.0:
        return math.log(math.erfc(u) / t) + u * u
    series = 1.0 - 1.0 / (2 * u * u) + 3.0 / (4 * u**4) - 15.0 / (8 * u**6)
    return math.log(series / (u * math.sqrt(math.pi) * t))


def fit(degree=DEGREE, nodes=4000):
    """Coefficients of P in powers of t (lowest first)."""
    s = np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)  # Chebyshev nodes of [-1, 1], s = 2t - 1
    t = np.clip(0.5 * (s + 1.0), 1e-7, 1.0)
    in_s = chebyshev.cheb2poly(chebyshev.chebfit(2.0 * t - 1.0, [p_exact(v) for v in t], degree))
    coeffs = np.zeros(degree + 1)
    for k, c in enumerate(in_s):  # powers of s = 2t - 1 to powers of t
        coeffs[: k + 1] += c * polynomial.polypow([-1.0, 2.0], k)
    return coeffs


def gelu_fp32(z, coeffs):
    """z * Phi(z) as the kernels evaluate it, in float32."""
    f32 = np.float32
    z = z.astype(f32)
    log2e = f32(math.log2(math.e))
    scaled = [f32(c * math.log2(math.e)) for c in coeffs]
    scaled[0] = f32(scaled[0] - 1.0)  # the factor 1/2 of Phi = erfc / 2
    t = f32(1.0) / (f32(1.0) + np.abs(z) * f32(0.5 / math.sqrt(2.0)))
    q = np.full_like(z, scaled[-1])
    for c in scaled[-2::-1]:
        q = q * t + c
    half_erfc = t * np.exp2(q - z * z * (log2e * f32(0.5)))
    return z * np.where(z >= 0, f32(1.0) - half_erfc, half_erfc)


if __name__ == "__main__":
    coeffs = fit()
    t = np.linspace(1e-6, 1.0, 200001)
    p_error = np.abs(polynomial.polyval(t, coeffs) - np.array([p_exact(v) for v in t])).max()
    print("coefficients of P(t), lowest power first:")
    print(", ".join(f"{c:.9g}" for c in coeffs))
    print(f"largest error of P (fp64), t in (0, 1]: {p_error:.3g}")
    z = np.linspace(-12.0, 12.0, 2_000_001)
    exact = z * 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in z])
    fast = gelu_fp32(z, coeffs).astype(np.float64)
    rel = np.abs(fast - exact) / np.maximum(np.abs(exact), np.finfo(np.float64).tiny)
    # the erf form loses Phi to cancellation below z = -5 (Phi < 3e-7): 0 in fp32 from z = -5.5
    for low in (-3.0, -5.0, -12.0):
        inside = z >= low
        print(f"largest relative error of gelu in fp32, z in [{low:g}, 12]: {rel[inside].max():.3g} "
              f"(fp32 epsilon {np.finfo(np.float32).eps:.3g})")
