"""Captured fwd+bwd steps of the DLRM MLPs with the wgrad's row slices of at least N rows."""
import json, os
import torch
from fusedmlp.bench.harness import graph_steps, interleaved_ms
from fusedmlp.bench.suites.mlp import _forward_fn, _make_inputs
from fusedmlp.ops import mlp as M

res = []
for sizes in ((13, 512, 256, 64, 16), (367, 512, 256, 1)):
    for m in (2048, 4096, 8192, 16384):
        shape = (m, *sizes)
        inputs, g = _make_inputs(shape, torch.bfloat16)
        calls = {}
        for min_rows in (1024, 512, 256, 128):
            M.WGRAD_MIN_SLICE_ROWS = min_rows
            M._wgrad_geometry.cache_clear()
            calls[min_rows] = graph_steps(_forward_fn(shape)("fused"), inputs, g)["fwd+bwd"]
        t = interleaved_ms(calls, 2)
        row = dict(sizes="-".join(map(str, sizes)), m=m, **{f"min{k}_us": [round(v * 1e3, 1) for v in vs] for k, vs in t.items()})
        res.append(row)
        print(json.dumps(row), flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "wgrad_slices.json"), "w"), indent=1)
