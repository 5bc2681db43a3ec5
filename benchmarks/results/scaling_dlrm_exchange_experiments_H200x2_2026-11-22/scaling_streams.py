"""benchmarks/scaling.py with fusedmlp._distributed.PUSH set: python diag/scaling_streams.py 0|1 ARGS..."""
import runpy
import sys

import fusedmlp._distributed as distributed

distributed.PUSH = bool(int(sys.argv.pop(1)))
sys.argv[0] = "benchmarks/scaling.py"
runpy.run_path("benchmarks/scaling.py", run_name="__main__")
