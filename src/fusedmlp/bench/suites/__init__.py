"""One module per fused op: ``NAME``, ``run_gpu``, ``summary_table``, ``run_cpu_check``."""

SUITES = {"geglu": "fusedmlp.bench.suites.glu"}
