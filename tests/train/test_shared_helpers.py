"""The helpers that became the one home of a rule written several times (issue 22): the YAML + ``KEY=VALUE``
config loader, the device check, the JSON-lines line reader, the outbox pump, the job runner, the run
machinery shared by ``streamd train`` and ``streamd pretrain``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from helpers import random_audio, write_wav
from streamd.config import ConfigError, check_device, load_config, load_yaml
from streamd.evaluation.sets import read_eval_set
from streamd.server.outbox import Outbox
from streamd.server.protocol import Close
from streamd.train.jobs import job_results, report_progress
from streamd.manifest_lines import iter_json_lines, resolve_audio
from streamd.train.run import _weighted_means


@dataclass(frozen=True)
class _Inner:
    lr: float = 0.1
    name: str = "x"


@dataclass(frozen=True)
class _Outer:
    inner: _Inner = field(default_factory=_Inner)
    steps: int = 3
    resume: bool = False


# --------------------------------------------------------------------------- config


def test_load_config_file_then_overrides_then_values(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("inner:\n  lr: 0.5\nsteps: 7\n")
    cfg = load_config(_Outer, p, ["inner.name=y", "steps=9"], values={"resume": True})
    assert cfg == _Outer(_Inner(0.5, "y"), 9, True)
    assert load_config(_Outer) == _Outer()  # no file: the defaults
    assert load_config(_Outer, None, ["inner.lr=1"]).inner.lr == 1.0


def test_load_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^override 'steps': expected KEY=VALUE, e\.g\. inner\.lr=0\.2$"):
        load_config(_Outer, None, ["steps"], example="inner.lr=0.2")
    with pytest.raises(ConfigError, match=r"^override '=3': expected KEY=VALUE$"):
        load_config(_Outer, None, ["=3"])
    with pytest.raises(ConfigError, match=r"^steps: is not a mapping, cannot set steps\.x$"):
        load_config(_Outer, None, ["steps=3", "steps.x=1"])
    with pytest.raises(ConfigError, match=r"^inner\.lrr: unknown key"):
        load_config(_Outer, None, ["inner.lrr=1"])
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: top level must be a mapping, got list"):
        load_config(_Outer, p)
    with pytest.raises(ConfigError, match=r"list\.yaml: top level must be a mapping"):
        load_yaml(p, _Outer)


def test_check_device():
    for ok in ("auto", "cpu", "cuda", "cuda:1"):
        check_device(ok)
    with pytest.raises(ConfigError, match=r"^engine\.device: must be auto, cpu, cuda or cuda:N, got 'gpu'$"):
        check_device("gpu", "engine.device")


# --------------------------------------------------------------------------- JSON lines


def test_iter_json_lines(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"a": 1}\n\n  \n{"a": 2}\n')
    assert list(iter_json_lines(p, lambda n: f"m:{n}")) == [(1, "m:1", {"a": 1}), (4, "m:4", {"a": 2})]
    p.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"^m line 2: invalid JSON \("):
        list(iter_json_lines(p, lambda n: f"m line {n}"))
    with pytest.raises(ValueError, match=r"^m:2: not valid JSON \("):
        list(iter_json_lines(p, lambda n: f"m:{n}", "not valid JSON"))
    p.write_text('[1, 2]\n')
    with pytest.raises(ValueError, match=r"^m:1: expected a JSON object, got list$"):
        list(iter_json_lines(p, lambda n: f"m:{n}"))


def test_resolve_audio(tmp_path):
    assert resolve_audio(tmp_path, "a/b.wav") == str(tmp_path / "a" / "b.wav")
    assert resolve_audio(tmp_path, "/x/y.wav") == "/x/y.wav"


def test_eval_set_limit_reads_no_further(tmp_path):
    write_wav(tmp_path / "a.wav", random_audio(0.2))
    p = tmp_path / "s.jsonl"
    p.write_text('{"audio": "a.wav", "text": "hi"}\nnot json\n')
    entries, _ = read_eval_set(p, limit=1)  # the bad line lies past the limit
    assert [e.text for e in entries] == ["hi"]
    with pytest.raises(ValueError, match=r"s.jsonl: no entries"):
        read_eval_set(p, limit=0)


# --------------------------------------------------------------------------- outbox pump


def test_outbox_pump_writes_in_order_and_returns_the_close():
    async def body():
        box = Outbox(8)
        got = []

        async def write(item):
            got.append(item)

        for m in ("a", "b"):
            box.put(m)
        box.close(1000, "bye")
        box.put("late")  # discarded once closing
        assert await box.pump(write) == Close(1000, "bye")
        assert got == ["a", "b"]

        box = Outbox(8)
        box.put("x")

        async def broken(item):
            raise ConnectionError("gone")

        with pytest.raises(ConnectionError):
            await box.pump(broken)

    asyncio.run(asyncio.wait_for(body(), 5))


# --------------------------------------------------------------------------- jobs


_SEEN: list = []


def _init(tag):
    _SEEN.append(tag)


def test_job_results_in_process_calls_init_and_keeps_order():
    _SEEN.clear()
    with job_results(lambda x: x * 2, [3, 1, 2], 1, _init, ("t",), 4) as results:
        assert list(results) == [6, 2, 4]
    assert _SEEN == ["t"]


def test_report_progress(capsys):
    report_progress("synth", 3, 10, "utterances", 5, 0.0)
    assert capsys.readouterr().err == ""
    report_progress("synth", 10, 10, "utterances", 5, 0.0)
    assert capsys.readouterr().err.startswith("synth: 10/10 utterances, ")


# --------------------------------------------------------------------------- run machinery


def test_weighted_means_over_validation_sets():
    sets = {"a": [0] * 1, "b": [0] * 3}
    per = {"a": {"loss": 4.0, "x": 1.0}, "b": {"loss": 0.0, "x": 1.0}}
    assert _weighted_means(per, sets, ("loss", "x")) == {"loss": 1.0, "x": 1.0, "sets": per}
    assert _weighted_means({"a": per["a"]}, {"a": [0]}, ("loss",)) == {"loss": 4.0}
