"""streamd.decode.hyps: the tensor store of hypotheses' tokens, frames and confidences, against plain
Python lists (one list of (token, frame, conf) per hypothesis) under random operations."""

import random

import pytest
import torch

from streamd.decode.hyps import HypBuffer, HypOut


def as_lists(buf: HypBuffer) -> list[list[list[tuple[int, int, float]]]]:
    """The buffer's valid contents: [stream][hypothesis] -> [(token, frame, conf), ...]."""
    out = []
    for b in range(buf.tokens.shape[0]):
        row = []
        for k in range(buf.tokens.shape[1]):
            n = int(buf.lengths[b, k])
            row.append([(int(buf.tokens[b, k, i]), int(buf.frames[b, k, i]), float(buf.confs[b, k, i]))
                        for i in range(n)])
        out.append(row)
    return out


def test_empty_buffer():
    buf = HypBuffer.empty(3, 2, capacity=5)
    assert buf.capacity == 5
    assert buf.tokens.shape == buf.frames.shape == buf.confs.shape == (3, 2, 5)
    assert buf.tokens.dtype == buf.frames.dtype == torch.long and buf.confs.dtype == torch.float32
    assert buf.lengths.tolist() == [[0, 0]] * 3
    assert buf.to_lists(torch.tensor([0, 1, 0])) == [HypOut((), (), ())] * 3
    assert buf.to_lists(torch.zeros(0, dtype=torch.long)) == []


def test_append_and_to_lists_with_scores():
    buf = HypBuffer.empty(2, 2, capacity=4)
    buf.append(torch.tensor([[True, False], [True, True]]), torch.tensor([[5, 9], [6, 7]]),
               torch.tensor([[0, 0], [3, 3]]), torch.tensor([[0.5, 0.1], [0.25, 0.75]]))
    buf.append(torch.tensor([[True, True], [False, True]]), torch.tensor([[8, 2], [1, 4]]),
               torch.tensor([[2, 2], [4, 5]]), torch.tensor([[1.0, 0.125], [0.3, 0.0]]))
    assert as_lists(buf) == [[[(5, 0, 0.5), (8, 2, 1.0)], [(2, 2, 0.125)]],
                             [[(6, 3, 0.25)], [(7, 3, 0.75), (4, 5, 0.0)]]]
    scores = torch.tensor([[-1.5, -2.0], [-0.25, -3.0]])
    assert buf.to_lists(torch.tensor([0, 1]), scores) == [HypOut((5, 8), (0, 2), (0.5, 1.0), -1.5),
                                                          HypOut((7, 4), (3, 5), (0.75, 0.0), -3.0)]
    assert buf.to_lists(torch.tensor([1, 0]))[0] == HypOut((2,), (2,), (0.125,), 0.0)


def test_reserve_grows_geometrically_and_keeps_the_contents():
    buf = HypBuffer.empty(1, 1, capacity=4)
    for v in range(4):
        buf.append(torch.tensor([[True]]), torch.tensor([[v + 1]]), torch.tensor([[v]]), torch.tensor([[0.5]]))
    before = as_lists(buf)
    buf.reserve(4)
    assert buf.capacity == 4  # enough room already: nothing changes
    buf.reserve(5)
    assert buf.capacity == 8  # at least doubled
    buf.reserve(30)
    assert buf.capacity == 30  # or what was asked for, if more
    assert as_lists(buf) == before
    assert buf.tokens.shape == buf.frames.shape == buf.confs.shape == (1, 1, 30)


def test_append_replaces_tensors_so_copies_stay_valid():
    """A copy taken before an update keeps what it had (the engine rolls a failed batch back that way)."""
    buf = HypBuffer.empty(1, 2, capacity=3)
    buf.append(torch.tensor([[True, True]]), torch.tensor([[1, 2]]), torch.tensor([[0, 0]]), torch.tensor([[0.5, 0.5]]))
    saved = buf.copy()
    snapshot = as_lists(saved)
    buf.append(torch.tensor([[True, False]]), torch.tensor([[3, 3]]), torch.tensor([[1, 1]]),
               torch.tensor([[0.9, 0.9]]))
    buf.clear(torch.tensor([True]))
    assert as_lists(saved) == snapshot
    assert as_lists(buf) == [[[], []]]


def test_appends_copy_shared_tensors_once_then_write_in_place():
    """After a copy the first append copies the tensors (neither side sees the other's tokens), later appends
    write in place; a gathered buffer owns fresh tensors, so its appends leave the source as it was."""
    one = (torch.tensor([[True, True]]), torch.tensor([[1, 2]]), torch.tensor([[0, 0]]), torch.tensor([[0.5, 0.5]]))
    buf = HypBuffer.empty(1, 2, capacity=4)
    buf.append(*one)
    saved = buf.copy()
    buf.append(*one)
    ptr = buf.tokens.data_ptr()
    buf.append(*one)
    assert buf.tokens.data_ptr() == ptr and buf.owned  # in place from the second append on
    saved.append(*one)  # the copy's own append copies too: buf keeps its three tokens
    assert as_lists(buf) == [[[(1, 0, 0.5)] * 3, [(2, 0, 0.5)] * 3]]
    assert as_lists(saved) == [[[(1, 0, 0.5)] * 2, [(2, 0, 0.5)] * 2]]
    g = buf.gather(torch.tensor([[1, 1]]))
    g.append(*one)
    assert as_lists(buf) == [[[(1, 0, 0.5)] * 3, [(2, 0, 0.5)] * 3]]
    assert as_lists(g) == [[[(2, 0, 0.5)] * 3 + [(1, 0, 0.5)], [(2, 0, 0.5)] * 4]]


def test_gather_select_clear_cat():
    buf = HypBuffer.empty(2, 3, capacity=2)
    buf.append(torch.ones(2, 3, dtype=torch.bool), torch.tensor([[1, 2, 3], [4, 5, 6]]),
               torch.tensor([[0, 1, 2], [3, 4, 5]]), torch.full((2, 3), 0.5))
    buf.append(torch.tensor([[False, True, False], [True, False, False]]), torch.tensor([[7, 8, 9], [10, 11, 12]]),
               torch.full((2, 3), 6), torch.full((2, 3), 0.25))
    full = as_lists(buf)
    g = buf.gather(torch.tensor([[1, 1], [2, 0]]))  # K' = 2 hypotheses that copy their parents
    assert as_lists(g) == [[full[0][1], full[0][1]], [full[1][2], full[1][0]]]
    assert as_lists(buf.select_streams(torch.tensor([1]))) == [full[1]]
    other = HypBuffer.empty(1, 1, capacity=5)
    other.append(torch.tensor([[True]]), torch.tensor([[13]]), torch.tensor([[9]]), torch.tensor([[1.0]]))
    cat = HypBuffer.cat([other, buf])
    assert cat.tokens.shape == (3, 3, 5)  # K and L padded to the largest
    assert as_lists(cat) == [[[(13, 9, 1.0)], [], []]] + full
    buf.clear(torch.tensor([False, True]))
    assert as_lists(buf) == [full[0], [[], [], []]]


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_match_python_lists(seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    b, k = 3, 4
    buf = HypBuffer.empty(b, k, capacity=1)
    ref = [[[] for _ in range(k)] for _ in range(b)]
    for step in range(40):
        op = rng.choice(["append", "append", "append", "gather", "clear"])
        if op == "append":
            buf.reserve(max(len(h) for row in ref for h in row) + 1)
            mask = torch.rand(b, k, generator=g) < 0.7
            tok = torch.randint(1, 30, (b, k), generator=g)
            conf = torch.rand(b, k, generator=g)
            buf.append(mask, tok, torch.full((b, k), step), conf)
            for i in range(b):
                for j in range(k):
                    if mask[i, j]:
                        ref[i][j].append((int(tok[i, j]), step, float(conf[i, j])))
        elif op == "gather":
            parent = torch.randint(0, k, (b, k), generator=g)
            buf = buf.gather(parent)
            ref = [[list(ref[i][int(parent[i, j])]) for j in range(k)] for i in range(b)]
        else:
            rows = torch.rand(b, generator=g) < 0.3
            buf.clear(rows)
            ref = [[[] for _ in range(k)] if rows[i] else ref[i] for i in range(b)]
        assert as_lists(buf) == ref
    which = torch.randint(0, k, (b,), generator=g)
    outs = buf.to_lists(which)
    for i, o in enumerate(outs):
        hyp = ref[i][int(which[i])]
        assert o.tokens == tuple(t for t, _, _ in hyp) and o.frames == tuple(f for _, f, _ in hyp)
        assert o.confs == pytest.approx([c for _, _, c in hyp])


@pytest.mark.parametrize("seed", range(6))
def test_trail_equals_gathering_and_appending_round_by_round(seed):
    """HypTrail (parents recorded, one copy at the end) against its definition: HypBuffer.gather and
    HypBuffer.append applied each round; rounds with no append, appends with no reorder, and the lengths
    it keeps along the way."""
    from streamd.decode.hyps import HypTrail

    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    b, k = 3, 4
    start = HypBuffer.empty(b, k, capacity=4)
    for _ in range(3):  # some history before the step
        start.append(torch.rand(b, k, generator=g) < 0.6, torch.randint(0, 30, (b, k), generator=g),
                     torch.randint(0, 9, (b, k), generator=g), torch.rand(b, k, generator=g))
    start.reserve(int(start.lengths.max()) + 12)
    before = as_lists(start)
    ref = start.copy()
    trail = HypTrail(start)
    for r in range(12):
        kind = rng.choice(["both", "both", "follow", "append"])
        if kind != "append":
            parent = torch.randint(0, k, (b, k), generator=g)
            ref = ref.gather(parent)
            trail.follow(parent)
        if kind != "follow":
            args = (torch.rand(b, k, generator=g) < 0.5, torch.randint(0, 30, (b, k), generator=g),
                    torch.full((b, k), 10 + r), torch.rand(b, k, generator=g))
            ref.append(*args)
            trail.append(*args)
        assert torch.equal(trail.lengths, ref.lengths)
    out = trail.materialize()
    assert as_lists(out) == as_lists(ref)
    assert as_lists(start) == before  # the start buffer is left unchanged
    assert HypTrail(start).materialize() is start  # nothing recorded: nothing copied


@pytest.mark.parametrize("seed", range(4))
def test_trail_rows_record_a_sub_batch_round(seed):
    """HypTrailRows: a round of some streams only, recorded on the whole batch's trail, equals HypBuffer.gather
    and HypBuffer.append on those streams, the others' hypotheses left in place without a token."""
    from streamd.decode.hyps import HypTrail

    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    b, k = 5, 3
    start = HypBuffer.empty(b, k, capacity=4)
    start.append(torch.rand(b, k, generator=g) < 0.6, torch.randint(0, 30, (b, k), generator=g),
                 torch.randint(0, 9, (b, k), generator=g), torch.rand(b, k, generator=g))
    start.reserve(int(start.lengths.max()) + 8)
    ref = start.copy()
    trail = HypTrail(start)
    for r in range(8):
        rows = torch.tensor(sorted(rng.sample(range(b), rng.randint(1, b))))
        ident = torch.arange(k).repeat(b, 1)
        parent = ident.clone()
        parent[rows] = torch.randint(0, k, (len(rows), k), generator=g)
        mask = torch.zeros(b, k, dtype=torch.bool)
        mask[rows] = torch.rand(len(rows), k, generator=g) < 0.5
        toks = torch.randint(0, 30, (b, k), generator=g)
        confs = torch.rand(b, k, generator=g)
        ref = ref.gather(parent)
        ref.append(mask, toks, torch.full((b, k), 10 + r), confs)
        sub = trail.rows(rows)
        sub.follow(parent[rows])
        assert torch.equal(sub.lengths, ref.lengths[rows] - mask[rows].long())  # parents' lengths
        sub.append(mask[rows], toks[rows], torch.full((len(rows), k), 10 + r), confs[rows])
        assert torch.equal(trail.lengths, ref.lengths)
    assert as_lists(trail.materialize()) == as_lists(ref)
