"""SwiGLU's three products after the dh kernel, one after another or two at a time on two streams.

    python benchmarks/swiglu_wgrad_beside_probe.py     (writes $OUT/swiglu_wgrad_beside_probe.json)

After the dh kernel the store-mode backward runs (ops/swiglu.py, ``_backward``): dW_down =
gy.T @ z (cuBLAS, split-K: its output has 56 tiles of 128 x 128 at d = 512), the gate/up pair
``[dW_up; dW_gate] = dh.T @ x`` (cuBLAS: 112 tiles of 128 x 128, one wave that leaves 20 of the
H200's 132 SMs idle) and dx (the dgrad ping-pong kernel, one program per SM). The two weight
gradients are independent; run side by side (``fork_join``: the first on a high-priority side
stream), the one could fill the SMs the other leaves idle.

Per shape, in CUDA graphs (us): each product alone; the three in the library's order (``seq``);
dW_down on the side stream beside the pair, then dx (``down_beside_pair``); dW_down beside the
pair and dx (``down_beside_pair_dx``); the pair beside dW_down and dx (``pair_beside_down_dx``);
``seq`` again last (how far the clock drifted).
The products' results are checked against the sequential ones (max abs difference).
"""
import torch

from fusedmlp.bench.harness import graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, write_sweep
from fusedmlp.ops._common import fork_join
from fusedmlp.ops.swiglu import _input_grad

SHAPES = [(16384, 512, 1792), (8192, 512, 1792), (65536, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632)]

if __name__ == "__main__":
    rows = []
    for (tokens, d, hidden), (x, gy, w_up, w_gate, w_down, dh) in swiglu_dh_cases(SHAPES):
        z = torch.randn(tokens, hidden, device="cuda", dtype=dh.dtype)
        grad_down = torch.empty(d, hidden, device="cuda", dtype=dh.dtype)
        grad_pair = torch.empty(2 * hidden, d, device="cuda", dtype=dh.dtype)
        grad_x = torch.empty_like(x)

        def down():
            torch.mm(gy.t(), z, out=grad_down)

        def pair():
            torch.mm(dh.t(), x, out=grad_pair)

        def dx():
            _input_grad(dh[:, :hidden], dh[:, hidden:], w_up, w_gate, grad_x, False)

        def pair_dx():
            pair()
            dx()

        def down_dx():
            down()
            dx()

        forms = {
            "seq": lambda: (down(), pair(), dx()),
            "down_beside_pair": lambda: (fork_join(x.device, down, pair), dx()),
            "down_beside_pair_dx": lambda: fork_join(x.device, down, pair_dx),
            "pair_beside_down_dx": lambda: fork_join(x.device, pair, down_dx),
        }
        r = dict(shape=[tokens, d, hidden], down=graph_us(down), pair=graph_us(pair), dx=graph_us(dx))
        forms["seq"]()
        reference = [t.clone() for t in (grad_down, grad_pair, grad_x)]
        for name, form in forms.items():
            for t in (grad_down, grad_pair, grad_x):
                t.zero_()
            form()
            torch.cuda.synchronize()
            r[name + "_maxdiff"] = max_abs_difference(zip((grad_down, grad_pair, grad_x), reference))
            r[name] = graph_us(form)
        r["seq_again"] = graph_us(forms["seq"])  # the clock's drift over the forms
        rows.append(r)
        print_sweep_row(r)
    write_sweep("swiglu_wgrad_beside_probe", rows)
