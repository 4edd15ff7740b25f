"""The optional second pass: each finished segment decoded again by a model that has heard real people.

The streaming transducer gives partials within tens of milliseconds; its finals on open-vocabulary real
speech are poor.  With ``engine.second_pass.model`` set (or ``--second-pass``, or ``second_pass`` in a v1
start message), the engine keeps each open segment's 16 kHz audio and hands it out with the segment's
Final (``second_pass: "pending"``); the transport decodes it again with a real-speech model and the client's
Final carries that text (``"pass": 2``) beside the first pass's (``first_pass_text``).  Partials, endpoints
and wake words are the first pass's, unchanged.

Modules, from the bottom up:

* :mod:`.cross_mask`: the Moonshine decoder graph's cross-attention bias, so segments of different lengths
  share a batch;
* :mod:`.models`: the real-speech models (Moonshine base via onnxruntime, Whisper via faster-whisper), by
  name or folder, with words and token probabilities (also the training "teachers"); Moonshine reads several
  segments in one batch (``recognize_many``);
* :mod:`.align`: second-pass words on the first pass's time axis; where to cut long segments;
* :mod:`.rescore`: :class:`~.rescore.SecondPass`, one Final in, the client's Final out (synchronous); a
  worker round's Finals and wake checks in one batched model call (``apply_all``);
* :mod:`.calibration`: the stored calibrations of the models' word probabilities, :func:`load_second_pass` and :func:`second_pass_for` (an engine config's);
* :mod:`.worker`: :class:`~.worker.SecondPassWorker`, a thread with a bounded queue for servers, and
  :class:`~.worker.FinalGate`, which keeps each stream's events in order behind its pending Final.

Nothing here imports faster_whisper or onnxruntime until a model is loaded.
"""
