"""streamd.config: the config dataclasses (validation once at construction, key paths in every error) and the
shipped configs/default.yaml (every option, documented)."""

import re

import pytest
import yaml

from helpers import ROOT
from streamd.config import (AppConfig, ConfigError, ConfidenceConfig, EncoderConfig, EngineConfig, FbankConfig,
                            KwsConfig, LimitsConfig, ModelConfig, ServerConfig, from_dict, load_yaml, to_dict)


def test_defaults_round_trip():
    cfg = EngineConfig()
    assert from_dict(EngineConfig, to_dict(cfg)) == cfg
    m = ModelConfig(keywords=("hey stream",))
    assert from_dict(ModelConfig, to_dict(m)) == m


@pytest.mark.parametrize("data,msg", [
    ({"decoding": {"beam": 0}}, "decoding.beam: must be 1..64, got 0"),
    ({"decoding": {"methd": "greedy"}}, "decoding.methd: unknown key"),
    ({"confidence": {"alpha": -1}}, "confidence.alpha: must be > 0"),
    ({"confidence": {"aggregation": "median"}}, "confidence.aggregation: must be one of"),
    ({"confidence": {"calibrated": "yes"}}, "confidence.calibrated: expected true/false"),
    ({"endpoint": {"rule2_trailing_silence": "long"}}, "endpoint.rule2_trailing_silence: expected a number"),
    ({"kws": {"thresholds": {"hey stream": 1.5}}}, "kws.thresholds.hey stream: must be in (0, 1)"),
    ({"device": "tpu"}, "device: must be auto, cpu, cuda or cuda:N"),
    ({"max_batch": True}, "max_batch: expected an integer"),
])
def test_errors_name_the_key(data, msg):
    with pytest.raises(ConfigError) as e:
        from_dict(EngineConfig, data)
    assert msg in str(e.value)


def test_model_config_checks():
    with pytest.raises(ConfigError, match="d_model: must be divisible by num_heads"):
        EncoderConfig(d_model=30, num_heads=4)
    with pytest.raises(ConfigError, match=r"encoder\.num_layers: must be a positive integer"):
        from_dict(ModelConfig, {"encoder": {"num_layers": 0}})
    with pytest.raises(ConfigError, match="blank_id"):
        ModelConfig(vocab_size=4, blank_id=4)
    with pytest.raises(ConfigError, match="keywords: duplicate keyword"):
        ModelConfig(keywords=("a", "a"))
    with pytest.raises(ConfigError, match=r"^encoder\.num_features: must equal fbank\.num_mel_bins \(40\), got 80"):
        ModelConfig(fbank=FbankConfig(num_mel_bins=40))  # the encoder would not take the front end's features


def test_frozen_and_immutable_mapping():
    k = KwsConfig(thresholds={"hey stream": 0.7})
    assert k.threshold_for("hey stream") == 0.7 and k.threshold_for("other") == 0.5
    with pytest.raises(TypeError):
        k.thresholds["x"] = 0.1  # type: ignore[index]
    with pytest.raises(Exception):
        ConfidenceConfig().alpha = 2  # type: ignore[misc]
    assert ConfidenceConfig().name == "entropy_tsallis_exp"
    assert ConfidenceConfig(measure="max_prob").name == "max_prob"
    assert ConfidenceConfig().calibrated is True
    with pytest.raises(ConfigError, match="calibrated: must be true or false, got 1"):
        ConfidenceConfig(calibrated=1)


def test_load_yaml_section(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("engine:\n  device: cpu\n  decoding:\n    method: modified_beam\n")
    cfg = load_yaml(p, EngineConfig, section="engine")
    assert cfg.device == "cpu" and cfg.decoding.method == "modified_beam"
    p.write_text("engine:\n  decoding:\n    beam: 100\n")
    with pytest.raises(ConfigError, match=r"engine\.decoding\.beam: must be 1..64, got 100"):
        load_yaml(p, EngineConfig, section="engine")


def test_config_keys_are_validated():
    assert ServerConfig().allowed_hosts == () and ServerConfig().show_model_paths is False
    assert ServerConfig().engine_process is True and ServerConfig().engine_nice == 10
    assert ServerConfig().engine_policy == "normal" and ServerConfig().nice == -5
    assert from_dict(AppConfig, {"server": {"nice": None}}).server.nice is None
    assert LimitsConfig().min_audio_rate == 0.1 and LimitsConfig().min_audio_window == 30.0
    cases = [({"server": {"allowed_hosts": ["http://x"]}}, "server.allowed_hosts[0]: must be a host name"),
             ({"server": {"allowed_hosts": ["x:80"]}}, "server.allowed_hosts[0]"),
             ({"server": {"allowed_hosts": "x"}}, "server.allowed_hosts: expected a list"),
             ({"server": {"show_model_paths": "yes"}}, "server.show_model_paths: expected true/false"),
             ({"server": {"engine_process": "yes"}}, "server.engine_process: expected true/false"),
             ({"server": {"engine_nice": 20}}, "server.engine_nice: must be an integer 0..19, got 20"),
             ({"server": {"engine_nice": -1}}, "server.engine_nice: must be an integer 0..19, got -1"),
             ({"server": {"nice": -21}}, "server.nice: must be an integer -20..19 or null, got -21"),
             ({"server": {"nice": 20}}, "server.nice: must be an integer -20..19 or null, got 20"),
             ({"server": {"nice": True}}, "server.nice: "),
             ({"server": {"engine_policy": "fifo"}},
              "server.engine_policy: must be one of ['normal', 'batch', 'idle'], got 'fifo'"),
             ({"limits": {"min_audio_rate": 2}}, "limits.min_audio_rate: must be 0..1"),
             ({"limits": {"min_audio_rate": 0.5, "max_realtime": 0.25}}, "limits.min_audio_rate: must be <= max_realtime"),
             ({"limits": {"min_audio_window": 0.5}}, "limits.min_audio_window: must be >= 1 second")]
    for data, msg in cases:
        with pytest.raises(ConfigError) as e:
            from_dict(AppConfig, data)
        assert msg in str(e.value), (data, str(e.value))
    cfg = from_dict(AppConfig, {"server": {"allowed_hosts": ["asr.example.com", "[::1]", "*"]},
                                "limits": {"min_audio_rate": 0, "max_realtime": 0}})
    assert cfg.server.allowed_hosts == ("asr.example.com", "[::1]", "*") and cfg.limits.min_audio_rate == 0


def flat_keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "thresholds":
            out |= flat_keys(v, f"{prefix}{k}.")
        else:
            out.add(prefix + k)
    return out


def test_default_yaml_documents_every_option():
    path = ROOT / "configs" / "default.yaml"
    assert load_yaml(path, AppConfig) == AppConfig()  # the shipped file says what the defaults are
    raw = yaml.safe_load(path.read_text())
    assert flat_keys(raw) == flat_keys(to_dict(AppConfig()))  # ... every one of them
    text = path.read_text()
    for key in flat_keys(raw):
        leaf = key.rsplit(".", 1)[-1]
        line = next(i for i, ln in enumerate(text.splitlines()) if re.match(rf"\s*{leaf}:", ln))
        above = text.splitlines()[line - 1].strip()
        assert "#" in text.splitlines()[line] or above.startswith("#"), f"{key} is not commented"


def test_each_listener_needs_a_port_of_its_own():
    """server.port, vosk_port and wyoming_port all bind server.host: two equal ports would fail at start
    ([Errno 98]) after the model loads; 0 (any free port) and null (off) never clash."""
    from streamd.config import AppConfig, ConfigError, from_dict

    for server, msg in (({"port": 2700, "vosk_port": 2700}, "server.vosk_port: 2700 is server.port too"),
                        ({"vosk_port": 10300, "wyoming_port": 10300}, "server.wyoming_port: 10300 is server.vosk_port"),
                        ({"port": 9000, "wyoming_port": 9000}, "server.wyoming_port: 9000 is server.port too")):
        with pytest.raises(ConfigError, match=re.escape(msg)):
            from_dict(AppConfig, {"server": server})
    from_dict(AppConfig, {"server": {"port": 0, "vosk_port": 0, "wyoming_port": 0}})
    from_dict(AppConfig, {"server": {"port": 8765, "vosk_port": 2700, "wyoming_port": 10300}})
