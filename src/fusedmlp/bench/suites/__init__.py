"""One module per fused op: ``NAME``, ``SHAPE_PRESETS``, ``run_gpu``, ``summary_table``, ``run_cpu_check``
(and optionally ``TABLE_NOTE``, the units line printed above the summary table)."""

SUITES = {
    "geglu": "fusedmlp.bench.suites.glu",
    "linear_act": "fusedmlp.bench.suites.linear_act",
    "swiglu": "fusedmlp.bench.suites.swiglu",
    "lora": "fusedmlp.bench.suites.lora",
    "add_mul_act": "fusedmlp.bench.suites.add_mul_act",
    "mlp": "fusedmlp.bench.suites.mlp",
    "dlrm": "fusedmlp.bench.suites.dlrm",
}
