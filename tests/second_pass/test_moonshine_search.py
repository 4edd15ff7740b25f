"""MoonshineTeacher's greedy search on a scripted decoder: the second pass (``recognize``) may not end before
its first token; ``transcribe`` (the teacher, Moonshine's own greedy search) may."""

from __future__ import annotations

import numpy as np
import pytest

from streamd.second_pass.models import Context, MoonshineTeacher, MoonshineTokenizer


class _Session:
    def __init__(self, run):
        self.run = run


def scripted(steps: list[dict[int, float]]) -> MoonshineTeacher:
    """A MoonshineTeacher whose decoder's logits at step k favour ``steps[k]`` (token -> logit; 0 elsewhere)."""
    t = MoonshineTeacher.__new__(MoonshineTeacher)
    vocab = [b"<unk>", b"<s>", b"</s>"] + [bytes([b]) for b in range(256)] + ["\u2581one".encode(), "\u2581two".encode()]
    t.tokenizer = MoonshineTokenizer(b"".join(bytes([len(p)]) + p for p in vocab))
    t._enc_in, t._heads, t._head_dim, t._past, t._bias_input = "x", 1, 2, [], None
    t._out_names = ["logits"]
    t._enc = _Session(lambda names, feed: [np.zeros((1, 4, 8), np.float32)])
    calls = []

    def dec(names, feed):
        if not feed["use_cache_branch"][0]:  # a new search starts
            calls.clear()
        k = len(calls)
        calls.append(int(feed["input_ids"][0, 0]))
        logits = np.zeros((1, 1, len(vocab)), np.float32)
        for tok, v in steps[min(k, len(steps) - 1)].items():
            logits[0, 0, tok] = v
        return [logits]

    t._dec = _Session(dec)
    return t


ONE, TWO, EOS = 259, 260, MoonshineTokenizer.EOS


def test_the_second_pass_reads_past_an_end_token_first():
    t = scripted([{EOS: 5.0, ONE: 4.0}, {EOS: 5.0}])
    assert t.transcribe(np.zeros(16000, np.float32)) == ""  # the teacher: Moonshine's own greedy search
    rec = t.recognize(np.zeros(16000, np.float32))
    assert rec.text == "one" and [w.word for w in rec.words] == ["one"]
    # the first token's probability keeps the end token's share: e^4 / (e^5 + e^4 + 259 e^0)
    z = np.exp(5.0) + np.exp(4.0) + (len(t.tokenizer.pieces) - 2)
    assert rec.words[0].prob == pytest.approx(np.exp(4.0) / z, rel=1e-5)


def test_a_search_that_starts_with_a_word_is_unchanged():
    t = scripted([{ONE: 6.0}, {TWO: 6.0}, {EOS: 6.0}])
    assert t.transcribe(np.zeros(16000, np.float32)) == t.recognize(np.zeros(16000, np.float32)).text == "one two"


def test_a_context_is_heard_first_and_its_tokens_forced():
    t = scripted([{ONE: 6.0}, {TWO: 6.0}, {EOS: 6.0}])  # alone: "one two"
    fed = []
    run = t._dec.run
    t._dec.run = lambda names, feed: (fed.append(int(feed["input_ids"][0, 0])), run(names, feed))[1]
    seen = []
    enc = t._enc.run
    t._enc.run = lambda names, feed: (seen.append(feed["x"].shape[1]), enc(names, feed))[1]
    ctx = Context(np.zeros(8000, np.float32), (ONE,))
    rec = t.recognize(np.zeros(16000, np.float32), context=ctx)
    assert seen == [24000]                           # the context's audio, then the piece's
    assert fed[:2] == [MoonshineTokenizer.BOS, ONE]  # forced through the context's tokens
    assert rec.text == "two" and rec.ids == (TWO,) and [w.word for w in rec.words] == ["two"]


def bigram(table: dict[int, dict[int, float]], vocab_size: int):
    """A decoder run whose logits at each position depend only on the token there (``table``: token -> {next
    token: logit}, 0 elsewhere), for every row of a batch: the teacher-forced scores have a closed form."""
    def run(names, feed):
        ids = feed["input_ids"]
        logits = np.zeros((*ids.shape, vocab_size), np.float32)
        for b in range(ids.shape[0]):
            for i, t in enumerate(ids[b]):
                for nxt, v in table.get(int(t), {}).items():
                    logits[b, i, nxt] = v
        return [logits]
    return run


def test_rival_gap_is_the_difference_of_the_two_texts_log_probabilities_after_the_prefix():
    t = scripted([{EOS: 1.0}])
    v = len(t.tokenizer.pieces)
    table = {MoonshineTokenizer.BOS: {ONE: 3.0}, ONE: {TWO: 2.0, EOS: 1.0}, TWO: {EOS: 4.0, ONE: 0.5}}
    t._dec = _Session(bigram(table, v))

    def logp(prev: int, nxt: int) -> float:  # the oracle: one softmax from its definition
        row = np.zeros(v)
        for k, x in table.get(prev, {}).items():
            row[k] = x
        return float(row[nxt] - np.log(np.exp(row).sum()))

    def total(prefix, text):
        seq = [MoonshineTokenizer.BOS, *prefix, *text, EOS]
        return sum(logp(a, b) for a, b in zip(seq[len(prefix):], seq[len(prefix) + 1:]))

    audio = np.zeros(16000, np.float32)
    for prefix, own, rivals in (((), [ONE, TWO], ([ONE], [TWO, ONE, TWO], [], [ONE, TWO])),
                                ((ONE,), [TWO], ([TWO, ONE, TWO], [], [ONE]))):
        ids, _, at = t._greedy(audio, min_tokens=1, prefix=prefix)
        assert ids == own
        assert at.own == pytest.approx(total(prefix, own), rel=1e-9)
        for rival in rivals:
            assert t.rival_gap(at, rival) == pytest.approx(total(prefix, rival) - total(prefix, own), abs=1e-9)
