"""streamd.cli.data (``streamd data``): importing a corpus into manifests (whole, or split by a hashed id
or speaker), the summary on stderr, manifest statistics, usage errors.  The importers themselves
(streamd.train.corpora) are tested in test_corpora.py, some of them through this command."""

import hashlib
import json

import numpy as np
import pytest
import soundfile as sf

from streamd.cli import main as streamd_main
from streamd.cli import data as data_cli


def test_cli_errors(tmp_path, capsys):
    assert streamd_main(["data", "import", "librispeech", "--out", str(tmp_path / "o")]) == 2
    assert "SRC is required" in capsys.readouterr().err
    assert streamd_main(["data", "import", "jsonl", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)]) == 2
    assert streamd_main(["data", "import", "saytime", str(tmp_path), "--out", str(tmp_path / "o"),
                         "--split", "train"]) == 2


def _jsonl_corpus(root):
    """A JSON-lines corpus of 12 short tones (4 speakers), one line without words and one without audio."""
    rows = []
    for i in range(12):
        t = np.arange(1600 * (i % 3 + 1)) / 16000
        sf.write(str(root / f"u{i}.wav"), (0.1 * np.sin(2 * np.pi * (300 + 40 * i) * t)).astype("float32"), 16000)
        rows.append({"audio": f"u{i}.wav", "text": f"Turn on light {i}", "speaker": f"s{i % 4}", "id": f"u{i}"})
    rows += [{"audio": "u0.wav", "text": "[noise]", "id": "empty"}, {"audio": "gone.wav", "text": "x", "id": "gone"}]
    (root / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "src.jsonl"


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_import_writes_one_manifest_and_reports_the_drops(tmp_path, capsys):
    src = _jsonl_corpus(tmp_path)
    out = tmp_path / "out"
    assert data_cli.data_main(["import", "jsonl", str(src), "--out", str(out), "--source", "mine"]) == 0
    rows = _rows(out / "manifest.jsonl")
    assert [r["id"] for r in rows] == [f"u{i}" for i in range(12)]
    assert rows[1]["text"] == "turn on light one" and rows[1]["orig_text"] == "Turn on light 1"
    assert {r["source"] for r in rows} == {"mine"}
    assert all(r["audio"] == str(tmp_path / f"{r['id']}.wav") for r in rows)  # outside --out: absolute
    assert not (out / "train.jsonl").exists()
    err = capsys.readouterr().err
    assert err.startswith("streamd data import jsonl: 12 utterances, ")
    assert f"{out / 'manifest.jsonl'}: 12" in err and "dropped: empty_text 1, missing_audio 1" in err


@pytest.mark.parametrize("by", ["id", "speaker"])
def test_holdout_splits_deterministically(tmp_path, capsys, by):
    src = _jsonl_corpus(tmp_path)
    out = tmp_path / by
    argv = ["data", "import", "jsonl", str(src), "--out", str(out), "--holdout", "0.5", "--holdout-by", by]
    assert streamd_main(argv) == 0
    train, dev, every = (_rows(out / f"{n}.jsonl") for n in ("train", "dev", "all"))
    assert len(every) == 12 and sorted(r["id"] for r in train + dev) == sorted(r["id"] for r in every)
    assert 0 < len(dev) < 12
    key = "id" if by == "id" else "speaker"
    held = {r[key] for r in every if int(hashlib.sha1(r[key].encode()).hexdigest()[:15], 16) / 16 ** 15 < 0.5}
    assert {r[key] for r in dev} == held
    if by == "speaker":
        assert not {r["speaker"] for r in train} & {r["speaker"] for r in dev}
    assert streamd_main(argv) == 0
    assert _rows(out / "dev.jsonl") == dev  # the same split again
    assert "train.jsonl" in capsys.readouterr().err


def test_stats_of_several_manifests(tmp_path, capsys):
    src = _jsonl_corpus(tmp_path)
    assert data_cli.data_main(["import", "jsonl", str(src), "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    manifest = tmp_path / "a" / "manifest.jsonl"
    assert data_cli.data_main(["stats", str(manifest), str(manifest), "--json"]) == 0
    stats = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(stats) == 2 and stats[0] == stats[1]
    assert stats[0]["utterances"] == 12 and stats[0]["speakers"] == 4
    assert data_cli.data_main(["stats", str(manifest)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == str(manifest) and text[1].startswith("  utterances 12 (0 noise/empty)")
    assert "speakers 4" in text[1] and "rate 16000 Hz x12" in text[1]
    assert data_cli.data_main(["stats", str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.startswith("streamd data: ")


def test_every_kind_is_a_choice_of_the_import_command():
    parser = data_cli.data_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    kind = next(a for a in sub.choices["import"]._actions if a.dest == "kind")
    assert list(kind.choices) == sorted(data_cli.KINDS)
    # the Debian-package kinds have a default source folder; the corpora need one given
    assert {k for k, v in data_cli.KINDS.items() if v is None} == {"speech-commands", "librispeech", "commonvoice",
                                                                  "kaldi", "jsonl", "sphinx"}
