"""streamd.cli.engine_args: the engine options every decoding command shares (a YAML file, then flags over it,
validated again) and the guard that turns bad input into ``PROG: message`` and status 2."""

import argparse
import dataclasses

import pytest

from streamd.config import ConfigError, EngineConfig, parse_phrases
from streamd.cli.engine_args import add_engine_args, engine_config_from_args, run_guarded


def parse(*argv):
    ap = argparse.ArgumentParser(prog="test")
    ap.add_argument("--device")  # each command adds its own --device
    add_engine_args(ap)
    return engine_config_from_args(ap.parse_args(list(argv)))


def test_no_flags_is_the_default_config():
    assert parse() == EngineConfig()


def test_flags_replace_decoding_fields_and_nothing_else():
    cfg = parse("--method", "modified_beam", "--beam", "7", "--lm", "none", "--lm-weight", "0.5", "--lm-bonus", "0.25",
                "--ctc-insertion-penalty", "1.5", "--device", "cpu")
    d = cfg.decoding
    assert (d.method, d.beam, d.lm, d.lm_weight, d.lm_bonus, d.ctc_insertion_penalty) == \
        ("modified_beam", 7, "none", 0.5, 0.25, 1.5)
    assert cfg.device == "cpu"
    assert dataclasses.replace(cfg, decoding=EngineConfig().decoding, device=EngineConfig().device) == EngineConfig()


def test_phrase_lists():
    cfg = parse("--wake-words", "computer, hey jarvis", "--method", "modified_beam",
                "--hotwords", "kitchen lights, timer")
    assert cfg.kws.wake_words == parse_phrases("computer, hey jarvis", "--wake-words")
    assert cfg.decoding.hotwords == parse_phrases("kitchen lights, timer", "--hotwords")
    assert parse("--hotwords", "").decoding.hotwords == parse_phrases("", "--hotwords")
    with pytest.raises(ConfigError, match="hotwords: need method modified_beam"):  # checked with the other flags
        parse("--method", "greedy", "--hotwords", "timer")


def test_yaml_engine_section_then_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("server:\n  port: 1234\nengine:\n  device: cpu\n  decoding:\n    method: modified_beam\n    beam: 3\n")
    cfg = parse("--config", str(f))
    assert (cfg.device, cfg.decoding.method, cfg.decoding.beam) == ("cpu", "modified_beam", 3)
    cfg = parse("--config", str(f), "--beam", "5")
    assert (cfg.decoding.method, cfg.decoding.beam) == ("modified_beam", 5)  # the flag over the file


def test_bad_values_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="beam"):
        parse("--beam", "0")  # validated again after the flags replaced the value
    f = tmp_path / "bad.yaml"
    f.write_text("engine:\n  decoding:\n    bogus: 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        parse("--config", str(f))
    with pytest.raises(SystemExit):
        parse("--method", "no_such_search")


def test_run_guarded(capsys):
    assert run_guarded("prog", lambda: 3) == 3 and run_guarded("prog", lambda: None) == 0
    assert capsys.readouterr().err == ""

    def fail(exc):
        def fn():
            raise exc
        return fn

    assert run_guarded("prog", fail(ConfigError("engine.beam: must be >= 1"))) == 2
    assert capsys.readouterr().err == "prog: config error: engine.beam: must be >= 1\n"
    for exc in (ValueError("bad input"), RuntimeError("bad input"), FileNotFoundError("bad input")):
        assert run_guarded("prog", fail(exc)) == 2
        assert capsys.readouterr().err == "prog: bad input\n"
    with pytest.raises(KeyError):  # anything else is a bug: not turned into a usage error
        run_guarded("prog", fail(KeyError("x")))
