"""Benchmarks: ``fusedmlp bench SUITE``. Timings need a CUDA GPU; without one a suite runs a
small interpreted accuracy check instead."""
