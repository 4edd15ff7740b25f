#!/usr/bin/env bash
# What each augmentation buys on real speech, measured alone (issue: a model that hears people).
# From the stage-14 release (synthetic speech only), 300 fine-tuning steps on the Speech Commands training
# split (clean, twice) + one synthetic corpus + 2 augmented copies of the split made with ONE augmentation
# (or clean copies: "none"), same seed and steps for every run; then greedy WER on the real dev sets
# (Speech Commands dev: other speakers; Asterisk held-out prompts: a voice and words the runs never heard).
# Run after `bash recipes/default/run.sh split synth`: bash recipes/default/ablate.sh
set -euo pipefail
REAL=${REAL:-../shared/real}
STEPS=${STEPS:-300}
declare -A AUG=([none]="" [speed]="--speed 1.0" [voice]="--voice-perturb 1.0" [real_rir]="--real-rir 1.0"
                [room_sim]="--room-sim 1.0" [noise]="--noise 1.0 --noise-manifest data/real/sc_train_silence_noise.jsonl"
                [channel]="--channel 1.0" [telephone]="--telephone 1.0")
mkdir -p exp/ablate
[[ -f exp/stage14.pt ]] || git show 4fab8fe^:streamd/assets/default.pt > exp/stage14.pt
for a in none speed voice real_rir room_sim noise channel telephone; do
  d=data/ablate/$a
  # shellcheck disable=SC2086
  [[ -f $d/manifest.jsonl ]] || streamd augment --manifest data/real/split/sc_train.fit.jsonl --out "$d" --copies 2 \
      --seed 31 --workers 1 ${AUG[$a]}
  if [[ ! -f exp/ablate/$a.pt ]]; then
    python3 - "$a" "$STEPS" <<'PY'
import sys, yaml
a, steps = sys.argv[1], int(sys.argv[2])
cfg = yaml.safe_load(open("recipes/default/stage15.yaml"))
cfg["exp_dir"] = f"exp/ablate/run_{a}"
cfg["init_from"] = "exp/stage14.pt"
cfg["data"]["train"] = ["data/synth/train21/manifest.jsonl", "data/real/split/sc_train.fit.jsonl",
                        f"data/ablate/{a}/manifest.jsonl"]
cfg["data"]["repeat"] = [1, 2, 1]
cfg.update(steps=steps, checkpoint_every=steps, keep_last=1, valid_every=steps, seed=31, num_threads=1)
cfg["optim"]["warmup_steps"] = 30
yaml.safe_dump(cfg, open(f"exp/ablate/{a}.yaml", "w"), sort_keys=False)
PY
    rm -rf "exp/ablate/run_$a"
    streamd train --config "exp/ablate/$a.yaml"
    cp "exp/ablate/run_$a/checkpoint-$STEPS.pt" "exp/ablate/$a.pt"
  fi
  [[ -f exp/ablate/$a.json ]] || streamd eval --model "exp/ablate/$a.pt" --set "$REAL/speech_commands/dev/manifest.jsonl" \
      --set data/real/asterisk/dev.jsonl --set ../shared/eval/dev/asr.jsonl --json > "exp/ablate/$a.json"
done
python3 - <<'PY'
import json
print(f"{'augmentation':12s} {'SC dev WER':>10s} {'Asterisk':>9s} {'synth dev':>9s}")
for a in ["none", "speed", "voice", "real_rir", "room_sim", "noise", "channel", "telephone"]:
    d = json.load(open(f"exp/ablate/{a}.json"))
    w = [s["wer"] * 100 for s in d["sets"]]
    print(f"{a:12s} {w[0]:10.2f} {w[1]:9.2f} {w[2]:9.2f}")
PY
