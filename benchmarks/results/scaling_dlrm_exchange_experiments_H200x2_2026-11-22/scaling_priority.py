"""benchmarks/scaling.py with the tables' side streams at high priority: python diag/scaling_priority.py ARGS..."""
import runpy
import sys

import torch

from fusedmlp.ops import embedding

def side_stream(self, device):
    device = torch.device(device)
    if device not in self._streams:
        self._streams[device] = torch.cuda.Stream(device, priority=-1)
    return self._streams[device]

def exchange_stream(self, device):
    key = ("exchange", torch.device(device))
    if key not in self._streams:
        self._streams[key] = torch.cuda.Stream(device, priority=-1)
    return self._streams[key]

embedding.SparseOptimizer.side_stream = side_stream
embedding.SparseOptimizer.exchange_stream = exchange_stream
sys.argv[0] = "benchmarks/scaling.py"
runpy.run_path("benchmarks/scaling.py", run_name="__main__")
