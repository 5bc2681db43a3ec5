"""The DLRM model test's table check over many seeds: the worst entries of the adagrad update."""
import sys, torch
sys.path.insert(0, "tests"); sys.path.insert(0, "scratch/old/src")
from fusedmlp.dlrm import DLRM, DLRMConfig
from fusedmlp.ops.embedding import SparseOptimizer, sparse_update_reference
SMALL = dict(cardinalities=tuple(range(3, 29)), embedding_dim=8, bottom_mlp=(24, 8), top_mlp=(16, 1))
DEVICE = "cuda"
worst = []
for seed in range(int(sys.argv[1])):
    torch.manual_seed(seed * 7919 + 12345)
    config = DLRMConfig(**SMALL, interaction="cat")
    model = DLRM(config).to(DEVICE)
    reference = DLRM(config).double().to(DEVICE)
    reference.load_state_dict(model.state_dict())
    batch, lr = 37, 0.3
    dense = torch.rand(batch, 13, device=DEVICE) * 3
    cats = torch.stack([torch.randint(0, n // 2 + 1, (batch,), device=DEVICE) for n in config.cardinalities], 1)
    labels = (torch.rand(batch, device=DEVICE) < 0.3).float()
    reference.loss(reference(dense.double(), cats), labels).backward()
    model.set_impl("fused").zero_grad()
    model.set_table_optimizer("adagrad", lr=lr)
    before_all = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("embeddings.")}
    model.loss(model(dense, cats), labels).backward()
    ref_tables = dict(reference.embeddings.named_parameters())
    for key, before in before_all.items():
        grad = ref_tables[key.removeprefix("embeddings.")].grad
        expected = before.double().clone()
        sparse_update_reference(expected, grad, SparseOptimizer("adagrad", lr, state=torch.zeros_like(expected)))
        change = model.state_dict()[key].double() - before.double()
        want = expected - before.double()
        rel = ((change - want).norm() / want.norm()).item()
        if rel > 5e-5:
            i = (change - want).abs().argmax()
            g = grad.flatten()[i].item()
            kept = (grad == 0) | (grad.abs() > 1e-6 * grad.abs().max())
            rel_kept = ((change - want)[kept].norm() / want[kept].norm()).item()
            worst.append((seed, key, rel, g, g / grad.abs().max().item(), rel_kept))
print("seeds", sys.argv[1], "tables with rel > 5e-5:", len(worst))
for w in worst:
    print("seed %d %s rel %.2e worst entry g %.3e (%.1e of max) rel with near-zero g left out %.2e" % w)
