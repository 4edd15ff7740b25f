"""streamd.options: the search methods' table, the ranges, a stream's options and their defaults, the one
error type, and that no other module restates these rules."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import streamd
from streamd import options as O
from streamd.config import ConfigError, DecodingConfig, EngineConfig, SecondPassConfig
from streamd.options import (APPEND_ONLY_METHODS, BEAM_METHODS, HOTWORD_METHODS, MAX_BEAM, METHODS, MIN_BEAM,
                             SEARCH_METHODS, SECOND_PASS_COST, OptionError, StreamDefaults, StreamOptions,
                             default_beam, stream_cost)

ROOT = Path(streamd.__file__).resolve().parent


# --------------------------------------------------------------------------- the table


def test_the_method_lists_are_read_off_the_table():
    assert SEARCH_METHODS == tuple(METHODS) == ("greedy", "modified_beam", "beam", "ctc_greedy", "ctc_prefix_beam")
    assert all(name == spec.name for name, spec in METHODS.items())
    assert BEAM_METHODS == ("modified_beam", "beam", "ctc_prefix_beam")
    assert HOTWORD_METHODS == ("modified_beam",)
    assert APPEND_ONLY_METHODS == ("greedy", "ctc_greedy")
    assert set(BEAM_METHODS) | set(APPEND_ONLY_METHODS) == set(SEARCH_METHODS)
    assert not set(BEAM_METHODS) & set(APPEND_ONLY_METHODS)


def test_the_table_is_consistent():
    for name, spec in METHODS.items():
        assert MIN_BEAM <= spec.default_beam <= MAX_BEAM, name
        assert not (spec.hotwords or spec.lm) or spec.beam, name  # hotword boosts and LM fusion score hypotheses
        if not spec.beam:  # one hypothesis: the beam costs nothing
            assert spec.stream_cost(MIN_BEAM) == spec.stream_cost(MAX_BEAM) == 1.0, name
        else:  # every hypothesis kept costs
            assert 1.0 < spec.stream_cost(MIN_BEAM) < spec.stream_cost(MAX_BEAM), name
    assert [s.name for s in METHODS.values() if s.ctc] == ["ctc_greedy", "ctc_prefix_beam"]


def test_default_beams_and_costs():
    assert default_beam("modified_beam") == 8
    assert default_beam("beam") == default_beam("ctc_prefix_beam") == default_beam("greedy") == 4
    assert default_beam("modified_beam", 3) == 3
    assert stream_cost("modified_beam") == stream_cost("modified_beam", 8) == pytest.approx(2.2)
    assert stream_cost("no_such_search", 64) == 1.0
    assert stream_cost("beam", 0) == stream_cost("beam", 1)  # never below one hypothesis


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs, code, message", [
    (dict(beam=0), "bad_message", "beam must be an integer 1..64, got 0"),
    (dict(beam=True), "bad_message", "beam must be an integer 1..64, got True"),
    (dict(beam=65), "bad_message", "beam must be an integer 1..64, got 65"),
    (dict(method="viterbi"), "bad_message", "method must be one of ['greedy', 'modified_beam', 'beam', "
                                            "'ctc_greedy', 'ctc_prefix_beam'], got 'viterbi'"),
    (dict(sample_rate=5), "bad_sample_rate", "sample_rate must be 8000..48000, got 5"),
    (dict(sample_rate=16000.0), "bad_sample_rate", "sample_rate must be an integer 8000..48000, got 16000.0 (float)"),
    (dict(partials="yes"), "bad_message", "partials must be true or false, got 'yes'"),
    (dict(second_pass=1), "bad_message", "second_pass must be true or false, got 1"),
    (dict(hotwords=["alice"]), "bad_message", "hotwords: need method modified_beam (the boost is a beam-search "
                                              "score), got method 'greedy'"),
    (dict(method="modified_beam", hotwords=["alice", "Alice"]), "bad_message", "hotwords[1]: duplicate phrase"),
    (dict(wake_models="hey"), "bad_message", "wake_models must be a list of keywords of loaded wake models"),
])
def test_an_invalid_option_is_one_error_type(kwargs, code, message):
    with pytest.raises(OptionError) as e:
        StreamOptions(**kwargs)
    assert str(e.value).startswith(message) and e.value.code == code
    assert isinstance(e.value, ValueError) and isinstance(e.value, ConfigError)  # one type, whatever the front end


def test_the_error_keeps_its_code_across_processes():
    e = pickle.loads(pickle.dumps(OptionError("sample_rate must be ...", "bad_sample_rate")))
    assert isinstance(e, OptionError) and e.code == "bad_sample_rate" and str(e) == "sample_rate must be ..."


def test_the_config_and_a_stream_check_the_same_beam_range():
    for beam in (MIN_BEAM, MAX_BEAM):
        assert DecodingConfig(beam=beam).beam == StreamOptions(beam=beam).beam == beam
    for beam in (MIN_BEAM - 1, MAX_BEAM + 1):
        with pytest.raises(ConfigError, match=f"beam: must be 1..64, got {beam}"):
            DecodingConfig(beam=beam)
        with pytest.raises(OptionError, match=f"beam must be an integer 1..64, got {beam}"):
            StreamOptions(beam=beam)


def test_phrases_are_parsed_once_into_the_options():
    opts = StreamOptions(method="modified_beam", hotwords="alice,  bob  smith", wake_words=[{"phrase": "hey",
                                                                                             "threshold": 0.3}])
    assert [p.phrase for p in opts.hotwords] == ["alice", "bob smith"]
    assert opts.wake_words[0].threshold == 0.3
    with pytest.raises(OptionError, match=r"hotwords\[0\]\.boost: bad value 'x'"):
        StreamOptions(method="modified_beam", hotwords=[{"phrase": "a", "boost": "x"}])
    with pytest.raises(OptionError, match=r"hotwords\[0\]\.size: unknown key \(known: boost, phrase, threshold\)"):
        StreamOptions(method="modified_beam", hotwords=[{"phrase": "a", "size": 1}])


# --------------------------------------------------------------------------- resolution of the defaults


def test_defaults_resolve_what_a_stream_leaves_out():
    plain = StreamDefaults().resolve({})
    assert (plain.method, plain.beam, plain.second_pass, plain.sample_rate, plain.partials) == \
        ("greedy", 4, False, 16000, True)
    assert StreamDefaults("modified_beam").resolve({}).beam == 8  # the method's own beam
    assert StreamDefaults("greedy").resolve({"method": "modified_beam"}).beam == 8  # the method named, its beam
    assert StreamDefaults(beam=6).resolve({"method": "ctc_prefix_beam"}).beam == 6  # the config's beam, any method
    assert StreamDefaults(second_pass=True).resolve({"beam": None, "method": None}).second_pass  # None: the default
    assert StreamDefaults(second_pass=True).resolve({"second_pass": False}).second_pass is False
    with pytest.raises(OptionError, match="unknown stream option 'colour'"):
        StreamDefaults().resolve({"colour": "red"})


def test_the_engine_config_gives_the_defaults():
    cfg = EngineConfig(decoding=DecodingConfig(method="modified_beam", beam=5),
                       second_pass=SecondPassConfig(model="whisper-tiny.en"))
    assert cfg.stream_defaults == StreamDefaults("modified_beam", 5, cfg.second_pass.enabled)
    assert EngineConfig().stream_defaults == StreamDefaults()


def test_cost_of_a_stream():
    d = StreamDefaults()
    assert d.cost(None) == d.cost({}) == 1.0
    assert d.cost({"method": "modified_beam"}) == pytest.approx(2.2)
    assert d.cost({"method": "modified_beam", "beam": 64, "second_pass": True}) == pytest.approx(10.6 + SECOND_PASS_COST)
    assert StreamDefaults(second_pass=True).cost({}) == 1.0 + SECOND_PASS_COST
    opts = d.resolve({"method": "beam", "beam": 16, "second_pass": True})
    assert opts.step_cost == stream_cost("beam", 16) and opts.cost == opts.step_cost + SECOND_PASS_COST
    assert d.cost({"method": "beam", "beam": 16, "second_pass": True}) == opts.cost  # priced before and after


# --------------------------------------------------------------------------- written once


def _code_constants(tree: ast.AST):
    """String constants that are not docstrings, and every other node."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Constant) and id(n) in docs):
            yield n


def _restatements(src: str, name: str) -> list[str]:
    lists = {frozenset(x) for x in (SEARCH_METHODS, BEAM_METHODS, HOTWORD_METHODS, APPEND_ONLY_METHODS)}
    ranges = (f"{MIN_BEAM}..{MAX_BEAM}", f"{O.MIN_SAMPLE_RATE}..{O.MAX_SAMPLE_RATE}")
    found = []
    for n in _code_constants(ast.parse(src)):
        where = f"{name}:{getattr(n, 'lineno', '?')}"
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)) and n.elts and \
                all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts) and \
                frozenset(e.value for e in n.elts) in lists:
            found.append(f"{where}: a method list {ast.unparse(n)}")
        if isinstance(n, ast.Dict) and n.keys and all(isinstance(k, ast.Constant) and k.value in METHODS
                                                     for k in n.keys) and \
                all(isinstance(v, ast.Constant) for v in n.values):
            found.append(f"{where}: a per-method table {ast.unparse(n)}")
        if isinstance(n, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in
                                              (MAX_BEAM, O.MIN_SAMPLE_RATE, O.MAX_SAMPLE_RATE)
                                              for c in (n.left, *n.comparators)):
            found.append(f"{where}: a range {ast.unparse(n)}")
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and any(r in n.value for r in ranges):
            found.append(f"{where}: a range in a message {n.value!r}")
    return found


def _module_restatements(path: Path) -> list[str]:
    return _restatements(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT.parent)))


def test_the_rules_are_written_once():
    """The method lists, a per-method table, the beam and sample-rate ranges (comparisons and the messages
    that state them) appear in streamd/options.py only: every other module imports them."""
    modules = sorted(p for p in ROOT.rglob("*.py") if p != ROOT / "options.py")
    assert len(modules) > 100  # the package is read at all
    assert [f for p in modules for f in _module_restatements(p)] == []


def test_the_checker_sees_a_restated_rule():
    src = ('M = ("greedy", "ctc_greedy")\nB = {"modified_beam": 8}\nok = 1 <= b <= 64\n'
           'msg = f"sample_rate must be 8000..48000, got {r}"\n')
    assert [f.split(": ", 1)[1] for f in _restatements(src, "probe.py")] == [
        "a method list ('greedy', 'ctc_greedy')", "a per-method table {'modified_beam': 8}", "a range 1 <= b <= 64",
        "a range in a message 'sample_rate must be 8000..48000, got '"]


def test_the_start_message_carries_the_stream_options():
    """The v1 start message's fields are a stream's options, plus its type and the audio's format."""
    from streamd.wire import START_FIELDS

    assert set(START_FIELDS) - {"type", "format"} == set(O.STREAM_FIELDS)
