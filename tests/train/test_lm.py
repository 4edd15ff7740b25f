"""streamd.train.lm (streamd lm): the fusion n-gram trained from the domain text generator."""

from streamd.decode.lm import load_lm
from streamd.cli.train import lm_main as main
from streamd.train.lm import generated_sentences, perplexity
from streamd.train.text import KEYWORD


def test_generated_sentences_are_seeded_and_mixed():
    a = generated_sentences(400, 3)
    assert a == generated_sentences(400, 3) and a != generated_sentences(400, 4)
    assert 0.1 < sum(s.startswith(KEYWORD) for s in a) / len(a) < 0.45
    assert generated_sentences(400, 3, slot_focus=0.0) == a
    assert generated_sentences(400, 3, slot_focus=0.8) != a


def test_cli_builds_an_lm_for_the_model(tiny_ckpt, tmp_path, capsys):
    extra = tmp_path / "extra.txt"
    extra.write_text("open the garage door\n\nclose the garage door\n")
    out = tmp_path / "x.lm.pt"
    assert main(["--out", str(out), "--model", tiny_ckpt, "--sentences", "500", "--order", "4",
                 "--min-count", "1", "--text", str(extra), "--slot-focus", "0.3"]) == 0
    assert "held-out perplexity" in capsys.readouterr().out
    lm, meta = load_lm(out)
    assert meta["sentences"] == 502 and meta["text_files"] == ["extra.txt"] and lm.order == 4
    assert meta["slot_focus"] == 0.3
    from streamd.model.checkpoint import load_checkpoint
    tokens = load_checkpoint(tiny_ckpt).tokens
    assert lm.tokens == tuple(tokens.to_lines())
    garage = tokens.encode("open the garage door")
    assert lm.sequence_logprob(garage) > lm.sequence_logprob(tokens.encode("open the garbage door"))
    assert 1.0 < perplexity(lm, [garage]) < 29


def test_cli_names_a_bad_text_line(tiny_ckpt, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("fine\nnot fine: 42\n")
    assert main(["--out", str(tmp_path / "y.pt"), "--model", tiny_ckpt, "--sentences", "10", "--text", str(bad)]) == 2
    assert "bad.txt line 2" in capsys.readouterr().err
