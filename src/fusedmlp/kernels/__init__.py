"""Triton kernels (``@triton.jit`` code only). Import after setting TRITON_INTERPRET if needed."""
