"""``streamd eval``: score a model through the streaming engine (WER, RTF, confidence, KWS).

Every file of an evaluation set (JSON lines: ``audio`` relative to the
file's folder, ``text``, optional ``voice``, ``keyword``, ``duration``) is
decoded as the daemon would: 0.1 s pieces fed to concurrent streams of one
:class:`~streamd.engine.Recognizer` (``batch_streams`` at a time, through
:func:`streamd.feed.feed_streams`), one batch step between rounds, endpointing
on; the hypothesis is every non-empty ``Final`` joined.  Two decodes per set,
both through the engine's public API:

1. **plain** (timed): the configured engine, exactly as served.  Gives the
   WER (:func:`~streamd.scoring.metrics.align_words`), the real-time factor
   (decode wall time / audio duration; ``rtf_single`` decodes the files one
   at a time instead) and the wake events at the configured thresholds.
2. **recording** (:mod:`streamd.scoring.recording`): the same engine built with
   a :class:`~streamd.scoring.recording.MeasureBank` as its ``measure`` and a
   :class:`~streamd.scoring.recording.KwsTrackRecorder` as its ``on_batch``
   observer.  Each Final's ``token_confs`` are bank tags, from which word
   confidences for every (measure, alpha, aggregation) of the study are
   recomputed without decoding again; the recorded KWS score tracks are
   replayed (:func:`~streamd.scoring.recording.replay_kws`) for a whole
   threshold sweep at once.  Self-checks in the report: the recording's text
   equals the plain text, and the plain engine's word confidences equal the
   recomputed ones for the configured measure (``conf_raw``, and ``conf`` =
   the calibration of it where the model's calibration applies).

Calibration: the expected calibration error (ECE, 10 bins) and the
reliability bins of the configured measure, and, when the model carries a
calibration the engine applies (:mod:`streamd.decode.calibration`), AUC, NCE,
ECE and bins of the calibrated confidences.
:meth:`~streamd.evaluation.recognition.Evaluator.word_confidences` gives
``streamd calibrate`` the same scored words, from the recording decode.

Scoring conventions: see :mod:`streamd.scoring.metrics` (normalized words,
hypothesis words correct when matched, AUC-ROC and NCE).  KWS: a positive
file (``keyword`` set) is detected when its keyword fires at least once;
every wake event in a negative file (``keyword`` null) is a false alarm;
FRR = missed / positives, FA/h per hour of negative audio
(:func:`~streamd.evaluation.kws.kws_counts`; :func:`~streamd.evaluation.kws.frr_at`
the best FRR within a false-alarm budget, :func:`~streamd.evaluation.kws.det_points`
the DET curve; ``--det-plot`` draws it).

**Keyword mode** (``--keywords [LIST]``,
:class:`~streamd.evaluation.keywords.KeywordEvaluator`): runtime wake words
(text, no retraining) instead of recognition.  Positive sets (``keyword``
fields) and negative sets (``keyword`` null) are pooled; per keyword the same
rule gives the miss rate (FRR) on its positives and the false alarms per hour
on all negatives, over a threshold sweep that is exact
(:func:`~streamd.evaluation.keywords.keyword_sweep`: the keyword search resets
at each detection, so a file with detections is decoded again above its lowest
score), with the miss rate at 1, 0.5 and 0.1 FA/h and a DET plot.

Modules, by purpose (this package imports none of them: import the one you need):

* :mod:`.sets`: evaluation sets (JSON lines) and their audio;
* :mod:`.options`: :class:`~.options.EvalOptions`, what a run does besides decoding;
* :mod:`.decoding`: running the recognizer over a set (timed plain decode, recording decode);
* :mod:`.wer`: word and sentence error rates, per voice and per source;
* :mod:`.confidence`: word-confidence quality (AUC, NCE per measure) and calibration (ECE, reliability);
* :mod:`.kws`: wake-word figures (FRR, FA/h, operating points, DET curves and plots);
* :mod:`.recognition`: :class:`~.recognition.Evaluator`, one set's full report;
* :mod:`.keywords`: keyword mode (runtime wake words, exact threshold sweep);
* :mod:`.report`: the readable text of the reports;
* the ``streamd eval`` command line is :mod:`streamd.cli.evaluate`.
"""
