#!/usr/bin/env bash
# The shipped second-pass adapter streamd/assets/moonshine-base-so762.adapter.npz and its calibration
# (model card, "Second pass"; docs/benchmarks.md, "moonshine-base-so762"). Run from the repository root after
# the `import` and `split` steps of recipes/default/run.sh (data/real/split: the Speech Commands and Asterisk
# fitting and validation splits) and `pip install -e ".[all]"`. About 60 min on 2 CPU cores; each
# `streamd adapt` resumes after an interruption.
set -euo pipefail
REAL=${REAL:-../shared/real}
OUT=${OUT:-data/second_pass}
mkdir -p "$OUT"
# speechocean762 train, its validation speakers held out (the release's split: 2180 fitting utterances, 320 validation)
python3 recipes/default/split_valid.py "$REAL/speechocean762/train/manifest.jsonl" --by speaker --share 0.1 \
    --out data/real/split
# 1. two epochs on speechocean762's fitting speakers (545 steps)
[[ -f $OUT/so762.adapter.npz ]] || streamd adapt --set data/real/split/train.fit.jsonl --out "$OUT/so762.adapter.npz"
# 2. half an epoch more on speechocean762, Speech Commands and Asterisk fitting splits together (276 steps)
[[ -f streamd/assets/moonshine-base-so762.adapter.npz ]] || streamd adapt --init "$OUT/so762.adapter.npz" \
    --set data/real/split/train.fit.jsonl --set data/real/split/sc_train.fit.jsonl \
    --set data/real/split/asterisk.fit.jsonl --epochs 0.5 --lr 2e-4 \
    --out streamd/assets/moonshine-base-so762.adapter.npz
# word calibration and segment choice (the features calibration, the command's default) on the validation
# splits (never dev) and 300 synthetic validation clips: the training recipe's validation split
# (streamd synth --num-utts 300 --seed 1001: the `synth` step of recipes/default/run.sh)
streamd calibrate --second-pass moonshine-base-so762 --set data/real/split/train.valid.jsonl \
    --set data/real/split/sc_train.valid.jsonl --set data/real/split/asterisk.valid.jsonl \
    --set "${SYNTH_VALID:-data/synth/valid/manifest.jsonl}"
