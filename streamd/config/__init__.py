"""Frozen configuration dataclasses, validated once at construction.

No torch and no asyncio here: this module is imported by every layer (model,
search, engine, server, CLI) and by tools that only check a YAML file.

Every dataclass validates itself in ``__post_init__`` and raises
:class:`ConfigError` whose message starts with the dotted field path, e.g.
``confidence.alpha: must be > 0, got -1``.  :func:`from_dict` builds nested
dataclasses from plain dicts (as loaded from YAML), rejecting unknown keys
with their full key path.

Rooms: :mod:`.checks` (the error and its checks), :mod:`.model` (features, model), :mod:`.decoding` (the
engine's sections), :mod:`.daemon` (``streamd serve``'s), :mod:`.loading` (dicts and YAML); every name is
exported here.  The search methods, their default beams and the hotword rule are :mod:`streamd.options`'s
table, exported here too.
"""

from __future__ import annotations

from ..options import (BEAM_METHODS, HOTWORD_METHODS, MAX_PHRASES, SEARCH_METHODS, PhraseSpec,
                       check_hotword_method, default_beam, parse_phrases)
from .checks import ConfigError, check_device
from .daemon import ENGINE_POLICIES, AppConfig, AuthConfig, LimitsConfig, MicConfig, ServerConfig, TlsConfig
from .decoding import (HOTWORDS_HELP, SECOND_PASS_HELP, TRANSDUCER_SCORES, WAKE_SCORES, WAKE_WORDS_HELP,
                       ConfidenceConfig, DecodingConfig, EndpointConfig, EngineConfig, KwsConfig, SecondPassConfig)
from .loading import from_dict, load_config, load_yaml, to_dict
from .model import DecoderConfig, EncoderConfig, FbankConfig, ModelConfig

__all__ = [
    "ConfigError",
    "FbankConfig",
    "EncoderConfig",
    "DecoderConfig",
    "ModelConfig",
    "ConfidenceConfig",
    "SecondPassConfig",
    "EndpointConfig",
    "KwsConfig",
    "PhraseSpec",
    "parse_phrases",
    "WAKE_WORDS_HELP",
    "HOTWORDS_HELP",
    "SECOND_PASS_HELP",
    "TRANSDUCER_SCORES",
    "WAKE_SCORES",
    "MAX_PHRASES",
    "DecodingConfig",
    "EngineConfig",
    "ServerConfig",
    "LimitsConfig",
    "AuthConfig",
    "TlsConfig",
    "MicConfig",
    "AppConfig",
    "from_dict",
    "to_dict",
    "load_yaml",
    "load_config",
    "SEARCH_METHODS",
    "HOTWORD_METHODS",
    "BEAM_METHODS",
    "default_beam",
    "ENGINE_POLICIES",
    "check_hotword_method",
    "check_device",
]
