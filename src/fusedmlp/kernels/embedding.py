"""Table-batched embedding: all tables of a model in one weight buffer, one gather kernel
forward, and a backward that applies the optimizer to the touched rows only (SGD or Adagrad),
so no gradient of the tables is ever formed.

    weight   [R, D]   the tables stacked: table t owns rows table_offsets[t] .. table_offsets[t + 1] - 1
    forward  out[b, t] = weight[table_offsets[t] + indices[b, t]]              [B, T, D]
             keys[b T + t] = table_offsets[t] + indices[b, t], or R (a sentinel) for an index
             outside its table, whose lookup reads zeros and whose gradient is dropped
    backward for every touched row r:  g_r = sum of d_out[b, t] over the lookups with key r
             SGD      w_r -= lr g_r
             Adagrad  s_r += g_r * g_r;  w_r -= lr g_r / (sqrt(s_r) + eps)   (elementwise, like
                      torch.optim.Adagrad; s is rounded to its dtype before the square root, as there)

The update takes three launches and is deterministic:
 1. torch.sort (stable) of the keys, so that the lookups of one row form one run (it needs the
    keys alone, so the forward does it: ops/embedding.py's update plan);
 2. ``embedding_segment_update_kernel``: each program takes BLOCK_P consecutive sorted lookups,
    gathers their gradient rows and runs a segmented prefix sum over them (tl.associative_scan,
    restarting at each new row and at the block's first lookup). A run that starts and ends
    inside the block is complete and its row is updated right there. The block also files the
    partial sum of its last run (tail), that run's key, and the partial sum of its first run when
    that run came in from the previous block (head);
 3. ``embedding_carried_update_kernel``: a run that crosses blocks is finished by the block where
    it ends: its head plus the tails of the earlier blocks whose last key is the same row. The
    keys are sorted, so those blocks are the ones just before; they are read W_BLOCKS at a time,
    so a hot row (Criteo's most frequent values fill a large share of a batch) costs a few wide
    reads, not a walk of one block at a time.
Each row is updated by exactly one program with a fixed order of additions: results do not
depend on scheduling. The sums are in fp32 (fp64 for fp64 tables). lr and eps come from a
device tensor of that dtype (``hyper_ptr``: [lr, eps]): a float argument would round them to
fp32, and a tensor can change between replays of a captured step.

Data-parallel tables (ops/embedding.py): each rank first sums its own lookups per row (steps
1-3 into a zero buffer; ``embedding_distinct_keys_kernel`` lists the distinct keys), the ranks
gather each other's lists of (row, sum), every list sorted by row with no row twice and padded
with R at the end, and ``embedding_merged_update_kernel``
applies the update from those WORLD lists directly: an entry of rank r whose row no earlier
rank holds adds the sums of the later ranks that hold it, in rank order, and updates the row.
No second sort: the lists are sorted already. Where the other ranks hold an entry's row
depends on the keys alone, so ``embedding_merge_links_kernel`` finds it (binary searches in
their lists) in the forward, once the keys are exchanged; the backward's update then reads
the sums it is linked to instead of searching (a chain of ~20 dependent loads per entry, on
the step's critical path at its end).
"""

import triton
import triton.language as tl

OPTIMIZER_SGD = tl.constexpr(1)
OPTIMIZER_ADAGRAD = tl.constexpr(2)


@triton.jit
def embedding_gather_kernel(
    weight_ptr, table_offsets_ptr, indices_ptr, out_ptr, keys_ptr,
    N, T, R, stride_idx_b, stride_idx_t, stride_w,
    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, WRITE_KEYS: tl.constexpr,
):
    """out [N, D] (N = B T lookups, row-major over (b, t)) and, for the backward, keys [N]."""
    lookup = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = lookup < N
    b = lookup // T
    t = lookup - b * T
    index = tl.load(indices_ptr + b * stride_idx_b + t * stride_idx_t, mask=valid, other=0).to(tl.int64)
    table_start = tl.load(table_offsets_ptr + t, mask=valid, other=0)
    table_end = tl.load(table_offsets_ptr + t + 1, mask=valid, other=0)
    key = table_start + index
    # within its table, and within weight even where table_offsets are wrong (unchecked)
    in_table = valid & (index >= 0) & (key < table_end) & (key >= 0) & (key < R)
    key = tl.where(in_table, key, R)
    col = tl.arange(0, D_PAD)[None, :]
    rows = tl.load(weight_ptr + key[:, None] * stride_w + col, mask=in_table[:, None] & (col < D), other=0.0)
    tl.store(out_ptr + lookup[:, None] * D + col, rows, mask=valid[:, None] & (col < D))
    if WRITE_KEYS:
        tl.store(keys_ptr + lookup, key.to(keys_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _segmented_add(start_a, sum_a, start_b, sum_b):
    """Combine of a segmented prefix sum: a segment start in b discards what came before it."""
    return start_a | start_b, tl.where(start_b != 0, sum_b, sum_a + sum_b)


@triton.jit
def _update_rows(weight_ptr, state_ptr, rows, grad, mask, hyper_ptr, stride_w, stride_s,
                 D: tl.constexpr, D_PAD: tl.constexpr, OPTIMIZER: tl.constexpr):
    """Apply the optimizer to weight[rows] (rows [X] int64, grad [X, D_PAD] summed gradients)."""
    lr = tl.load(hyper_ptr)
    col = tl.arange(0, D_PAD)[None, :]
    m = mask[:, None] & (col < D)
    w_ptrs = weight_ptr + rows[:, None] * stride_w + col
    w = tl.load(w_ptrs, mask=m, other=0.0)
    if OPTIMIZER == OPTIMIZER_ADAGRAD:
        s_ptrs = state_ptr + rows[:, None] * stride_s + col
        s = tl.load(s_ptrs, mask=m, other=0.0).to(grad.dtype) + grad * grad
        s = s.to(state_ptr.dtype.element_ty)
        tl.store(s_ptrs, s, mask=m)
        step = lr * grad / (tl.sqrt(s.to(grad.dtype)) + tl.load(hyper_ptr + 1))
    else:
        step = lr * grad
    tl.store(w_ptrs, (w.to(grad.dtype) - step).to(weight_ptr.dtype.element_ty), mask=m)


@triton.jit
def embedding_segment_update_kernel(
    sorted_keys_ptr, order_ptr, grad_ptr, weight_ptr, state_ptr, tail_ptr, head_ptr, last_key_ptr,
    N, R, hyper_ptr, stride_w, stride_s,
    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_P: tl.constexpr, OPTIMIZER: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Step 2 of the backward (module docstring); grad is d_out as [N, D], order the sort's permutation."""
    block = tl.program_id(0)
    slot = tl.arange(0, BLOCK_P)
    pos = block.to(tl.int64) * BLOCK_P + slot
    in_range = pos < N
    key = tl.load(sorted_keys_ptr + pos, mask=in_range, other=R).to(tl.int64)
    prev_key = tl.load(sorted_keys_ptr + pos - 1, mask=in_range & (pos > 0), other=-1).to(tl.int64)
    next_key = tl.load(sorted_keys_ptr + pos + 1, mask=pos + 1 < N, other=-1).to(tl.int64)
    run_start = key != prev_key
    run_end = key != next_key
    first = slot == 0

    lookup = tl.load(order_ptr + pos, mask=in_range, other=0).to(tl.int64)
    col = tl.arange(0, D_PAD)[None, :]
    grad = tl.load(grad_ptr + lookup[:, None] * D + col, mask=in_range[:, None] & (col < D), other=0.0)
    restart = tl.broadcast_to((run_start | first).to(tl.int32)[:, None], (BLOCK_P, D_PAD))
    _, partial = tl.associative_scan((restart, grad.to(ACC_DTYPE)), 0, _segmented_add)

    # the block's first run came in from the previous block unless it starts at the first slot
    in_first_run = tl.cumsum((run_start & (slot > 0)).to(tl.int32), 0) == 0
    carried_in = in_first_run & (tl.sum((first & run_start).to(tl.int32), 0) == 0)
    complete = run_end & in_range & (key < R) & (carried_in == 0)
    _update_rows(weight_ptr, state_ptr, key, partial, complete, hyper_ptr, stride_w, stride_s, D, D_PAD, OPTIMIZER)

    last_slot = tl.minimum(N - block.to(tl.int64) * BLOCK_P, BLOCK_P) - 1
    at_last = slot == last_slot
    col1 = tl.arange(0, D_PAD)
    tl.store(tail_ptr + block * D_PAD + col1, tl.sum(tl.where(at_last[:, None], partial, 0.0), 0))
    tl.store(last_key_ptr + block, tl.sum(tl.where(at_last, key, 0), 0))
    at_head = carried_in & run_end & in_range
    tl.store(head_ptr + block * D_PAD + col1, tl.sum(tl.where(at_head[:, None], partial, 0.0), 0))


@triton.jit
def embedding_carried_update_kernel(
    sorted_keys_ptr, tail_ptr, head_ptr, last_key_ptr, weight_ptr, state_ptr,
    N, R, hyper_ptr, stride_w, stride_s,
    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_P: tl.constexpr, W_BLOCKS: tl.constexpr,
    OPTIMIZER: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """Step 3 of the backward: program ``block`` finishes the run that came into it, if it ends there."""
    block = tl.program_id(0)
    first_pos = block.to(tl.int64) * BLOCK_P
    key = tl.load(sorted_keys_ptr + first_pos).to(tl.int64)
    prev_key = tl.load(sorted_keys_ptr + first_pos - 1, mask=block > 0, other=-1).to(tl.int64)
    next_block_key = tl.load(sorted_keys_ptr + first_pos + BLOCK_P, mask=first_pos + BLOCK_P < N,
                             other=-1).to(tl.int64)
    if (key == prev_key) & (key < R) & (next_block_key != key):
        col = tl.arange(0, D_PAD)
        total = tl.load(head_ptr + block * D_PAD + col)
        window_end = block  # blocks [window_end - W_BLOCKS, window_end) are read next
        more = window_end > 0
        while more:
            earlier = window_end - W_BLOCKS + tl.arange(0, W_BLOCKS)
            same_row = tl.load(last_key_ptr + earlier, mask=earlier >= 0, other=-1) == key
            tails = tl.load(tail_ptr + earlier[:, None] * D_PAD + col[None, :], mask=same_row[:, None], other=0.0)
            total += tl.sum(tails, 0)
            window_end -= W_BLOCKS
            more = (window_end > 0) & (tl.load(last_key_ptr + window_end - 1, mask=window_end > 0, other=-1) == key)
        rows = tl.zeros([1], tl.int64) + key
        _update_rows(weight_ptr, state_ptr, rows, total[None, :].to(ACC_DTYPE), rows >= 0, hyper_ptr, stride_w, stride_s,
                     D, D_PAD, OPTIMIZER)


@triton.jit
def embedding_distinct_keys_kernel(sorted_keys_ptr, run_ptr, distinct_ptr, N, BLOCK: tl.constexpr):
    """distinct[run[i]] = sorted_keys[i] at the first lookup of each run (i = 0, or a key unlike
    the one before): one store per distinct key. (A scatter from every lookup stores a hot
    row's key once per lookup, to one address: 62 us at DLRM's 1.7M lookups on an H200.)"""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = i < N
    key = tl.load(sorted_keys_ptr + i, mask=valid)
    before = tl.load(sorted_keys_ptr + i - 1, mask=valid & (i > 0), other=-1)  # keys are >= 0
    first = valid & (key != before)
    run = tl.load(run_ptr + i, mask=first, other=0)
    tl.store(distinct_ptr + run, key, mask=first)


@triton.jit
def _find(keys_ptr, key, L, SEARCH_STEPS: tl.constexpr):
    """Position of ``key`` in the ascending list keys[0:L] (vectorised over key), and whether it is there."""
    lo = tl.zeros_like(key)
    hi = lo + L
    for _ in tl.static_range(SEARCH_STEPS):  # 2^SEARCH_STEPS > L: enough halvings to close [lo, hi)
        open_ = lo < hi
        mid = (lo + hi) // 2
        probe = tl.load(keys_ptr + mid, mask=open_, other=0).to(tl.int64)
        below = open_ & (probe < key)
        above = open_ & (probe >= key)
        lo = tl.where(below, mid + 1, lo)
        hi = tl.where(above, mid, hi)
    found = tl.load(keys_ptr + lo, mask=lo < L, other=-1).to(tl.int64) == key
    return lo, found


# parts of embedding_merged_update_kernel
MERGED_ALL = tl.constexpr(0)
MERGED_OWN_ONLY = tl.constexpr(1)
MERGED_REST = tl.constexpr(2)


@triton.jit
def _list_block(keys_ptr, L, R, BLOCK_P: tl.constexpr, first_list=0):
    """This program's BLOCK_P entries of one rank's list (keys [WORLD, L], R pads; the grid's
    lists start at rank ``first_list``): the rank, the positions in its list, the entries
    (flat indices), their keys, and which of them hold a row (a real position and key)."""
    blocks_per_rank = tl.cdiv(L, BLOCK_P)
    rank = first_list + tl.program_id(0) // blocks_per_rank
    pos = (tl.program_id(0) % blocks_per_rank).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    entry = rank.to(tl.int64) * L + pos
    key = tl.load(keys_ptr + entry, mask=pos < L, other=R).to(tl.int64)
    return rank, pos, entry, key, (pos < L) & (key < R)


@triton.jit
def embedding_merge_links_kernel(
    keys_ptr, links_ptr, L, R,
    WORLD: tl.constexpr, SEARCH_STEPS: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """links [WORLD, WORLD * L] (int32): ``links[o, e]`` = the position in rank o's list of the
    row of entry e (of keys [WORLD, L], each rank's list ascending, unique, R pads), or -1
    where rank o does not hold it (and for o = the entry's own rank). Program p takes BLOCK_P
    entries of one rank's list."""
    rank, pos, _, key, held = _list_block(keys_ptr, L, R, BLOCK_P)
    for other in tl.static_range(WORLD):
        at = tl.full((BLOCK_P,), -1, tl.int64)
        if other != rank:
            where, found = _find(keys_ptr + other * L, key, L, SEARCH_STEPS)
            at = tl.where(found & held, where, -1)
        # links[other, entry], in int64: (other * WORLD + rank) * L + pos
        tl.store(links_ptr + (other * WORLD + rank.to(tl.int64)) * L + pos, at.to(tl.int32), mask=pos < L)


@triton.jit
def embedding_merged_update_kernel(
    keys_ptr, links_ptr, sums_ptr, weight_ptr, state_ptr, L, R, hyper_ptr, stride_w, stride_s, own,
    WORLD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_P: tl.constexpr, OPTIMIZER: tl.constexpr, ACC_DTYPE: tl.constexpr, PART: tl.constexpr,
):
    """The update from the ranks' gathered lists: keys [WORLD, L] (each ascending, unique, R
    pads), sums [WORLD, L, D], links [WORLD, WORLD * L] (``embedding_merge_links_kernel``).
    Program p takes BLOCK_P entries of one rank's list. Each row is updated once, by the entry
    of the first rank that holds it, with the ranks' sums added in rank order.

    PART (MERGED_ALL, MERGED_OWN_ONLY, MERGED_REST): all of it; or first the rows that rank
    ``own`` alone holds (the grid covers its list only), which need no other rank's sums and
    can run while those are still arriving, then the rest. Either way every row gets the same
    total, so the two parts leave the tables bit for bit as the whole does."""
    rank, pos, entry, key, mine = _list_block(keys_ptr, L, R, BLOCK_P, own if PART == MERGED_OWN_ONLY else 0)
    col = tl.arange(0, D_PAD)[None, :]
    total = tl.load(sums_ptr + entry[:, None] * D + col, mask=mine[:, None] & (col < D), other=0.0).to(ACC_DTYPE)
    elsewhere = pos < 0  # held by another rank too
    for other in tl.static_range(WORLD):
        # an earlier rank holding the row updates it; a later one's sum joins this one, in rank order
        if other != rank:
            at = tl.load(links_ptr + (other * WORLD + rank.to(tl.int64)) * L + pos, mask=mine, other=-1).to(tl.int64)
            elsewhere = elsewhere | (at >= 0)
            if other < rank:
                mine = mine & (at < 0)
            elif PART != MERGED_OWN_ONLY:  # (that part reads no other rank's sums)
                later = mine & (at >= 0)
                total += tl.load(sums_ptr + (other * L + at)[:, None] * D + col, mask=later[:, None] & (col < D),
                                 other=0.0).to(ACC_DTYPE)
    if PART == MERGED_OWN_ONLY:
        mine = mine & ~elsewhere
    elif PART == MERGED_REST:
        if rank == own:
            mine = mine & elsewhere
    _update_rows(weight_ptr, state_ptr, key, total, mine, hyper_ptr, stride_w, stride_s, D, D_PAD, OPTIMIZER)
