"""``streamd bench wake-mycroft``: trained wake models on Mycroft's real recordings: thresholds on the dev half,
figures on the test half.

    OMP_NUM_THREADS=1 streamd bench wake-mycroft athena.wake.pt amelia.wake.pt ... [--oww [MODEL.onnx ...]]
                                                 [--precision auto|float32|bfloat16] [--verify NAME]
                                                 [--verify-before S] [--verify-after S] [--talk-after]

``--precision``: the speech embedding's arithmetic (as ``engine.kws.embedding_precision``).

Halves by the parity of the SHA-1 of each file's name (the split of docs/benchmarks.md, "Runtime wake
words"); positives: ``../shared/real/mycroft`` wake clips (the shared folder: ``$STREAMD_SHARED``, else ``../shared``
beside the checkout); negatives: Mycroft ``not_wake``, Speech Commands
dev and the negatives of ``../shared/eval/dev/kws.jsonl``.  Printed: per model the test miss and FA/h at the
model's own threshold, at the dev-chosen threshold (lowest dev miss at <= 0.5 FA/h) and the test half's
own best at <= 0.5 FA/h; then a Markdown table.  The set files are written under ``/tmp/wake_mycroft_sets``.

``--verify NAME``: each model followed by the second-pass model ``NAME`` (``moonshine-base-so762``) as a verifier:
each detection's audio (2.0 s before its frame's end to 0.5 s after, ``engine.kws.verify_before_s`` /
``verify_after_s``) is decoded by that model and the detection stands when log P(keyword) - log P(the model's
own text) reaches the verifier's threshold (:func:`streamd.evaluation.wake.verified_sweep`); the pair of
thresholds chosen on the dev half (lowest miss at <= 0.5 FA/h) per keyword and one pair for all keywords,
and the configured pair (``engine.kws.verify_wake_threshold``, ``verify_gap``) on the test half, simulated
from the score tracks, and the one pair for all through the engine (the shipped model with
``engine.kws.verify``, the second pass in line); printed and written to
``/tmp/wake_mycroft_sets/verify_out.json``.  ``--talk-after``: then the test positives with talk right after
the keyword (:func:`talk_after`), ``talk_out.json``.

``--oww``: openWakeWord's pretrained models as peers (:mod:`streamd.evaluation.oww`; pip package
``openwakeword``, models CC BY-NC-SA 4.0: measured, never shipped), by default the four wake-phrase models
its package bundles (alexa, hey jarvis, hey mycroft, hey rhasspy), scored on the same files with the same
counting (:func:`~streamd.evaluation.wake.wake_model_figures`, refractory 1 s in 80 ms frames).  Mycroft has
no clip of these keywords, so a peer has no positives here: printed are its false alarms per hour on the
test half at its default threshold 0.5 and at the dev-chosen threshold (the lowest with <= 0.5 FA/h on the
dev half), on the negatives and on the negatives plus every Mycroft wake clip of the half (490 real "athena",
"hey computer", ... clips on the test half: none is a peer's keyword), and the test half's own lowest
threshold at <= 0.5 FA/h; the JSON lands in ``/tmp/wake_mycroft_sets/oww_out.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..paths import shared_root

__all__ = ["write_halves", "wake_mycroft", "talk_after"]

SETS = Path("/tmp/wake_mycroft_sets")
BASE = {"athena": 89.6, "amelia": 66.4, "hey savant": 56.6, "computer": 42.9, "hey chatterbox": 80.8,
        "hey computer": 25.0}  # the table's "runtime search" column: its miss at the same negatives (docs)
OWW_BUNDLED = ("alexa", "hey_jarvis", "hey_mycroft", "hey_rhasspy")
FRAME_S, REFRACTORY_S = 0.08, 1.0  # the wake models' frame (one embedding every 80 ms) and the detectors' refractory
RATE = 16000  # what the wake models and the verifier hear


def write_halves(shared: Path, sets_dir: Path) -> None:
    """The dev / test halves of each source (parity of the SHA-1 of the file name) as JSON-lines sets."""
    sets_dir.mkdir(parents=True, exist_ok=True)
    srcs = {"mycroft": shared / "real/mycroft/manifest.jsonl",
            "sc": shared / "real/speech_commands/dev/manifest.jsonl", "kwsdev": shared / "eval/dev/kws.jsonl"}
    for name, man in srcs.items():
        halves = {"dev": [], "test": []}
        for line in open(man):
            if not line.strip():
                continue
            o = json.loads(line)
            if name == "kwsdev" and o.get("keyword"):
                continue  # its "hey stream" positives are not these keywords
            o["audio"] = str(man.parent / o["audio"])
            o["text"] = o.get("text") or ""
            h = int(hashlib.sha1(os.path.basename(o["audio"]).encode()).hexdigest(), 16) % 2
            halves["dev" if h == 0 else "test"].append(o)
        for k, v in halves.items():
            with open(sets_dir / f"{k}_{name}.jsonl", "w") as f:
                f.writelines(json.dumps(o) + "\n" for o in v)


def _score(models: list, oww: Any, peers: list, sets_dir: Path, precision: str = "auto") -> tuple[dict, dict]:
    """Per half: the trained models' figures and the peers' (negatives; negatives plus every wake clip)."""
    from ..evaluation.sets import load_entries, read_eval_set
    from ..evaluation.wake import score_tracks, wake_model_figures
    from ..model.wake import WakeScorer

    res, peer_res = {}, {}
    for half in ("dev", "test"):
        ents = []
        for s in ("mycroft", "sc", "kwsdev"):
            ents += read_eval_set(sets_dir / f"{half}_{s}.jsonl")[0]
        audio = load_entries(ents, None)
        secs = [len(x) / r for x, r in audio]
        if models:
            t0 = time.time()
            tracks = score_tracks(WakeScorer(models, precision=precision), audio)
            res[half] = (ents, tracks, secs, wake_model_figures(models, ents, tracks, secs, REFRACTORY_S, FRAME_S))
            print(half, "scored", round(sum(secs)), "s audio in", round(time.time() - t0), "s", file=sys.stderr)
        if peers:
            from ..evaluation.oww import peer_figures

            t0 = time.time()
            tracks = oww.tracks(audio)
            # the same files again with every wake clip a negative (none is a peer's keyword)
            as_neg = [dataclasses.replace(e, keyword=None) for e in ents]
            peer_res[half] = (peer_figures(peers, ents, tracks, secs, REFRACTORY_S),
                              peer_figures(peers, as_neg, tracks, secs, REFRACTORY_S))
            print(half, "openWakeWord scored", round(sum(secs)), "s audio in", round(time.time() - t0), "s",
                  file=sys.stderr)
    return res, peer_res


def _models_table(models: list, res: dict, sets_dir: Path) -> None:
    """The trained models' figures: per model a line, then the Markdown table; the JSON in eval_out.json."""
    out = {}
    tot_pos = tot_miss = 0
    for m in models:
        d = res["dev"][3][m.keyword]; t = res["test"][3][m.keyword]
        op = d["frr_at_0.5_fa_per_hour"]
        thr = op["threshold"] if op else 0.9999
        tp = next(s for s in t["sweep"] if s["threshold"] == thr)
        own = next(s for s in t["sweep"] if s["threshold"] == m.threshold)
        out[m.keyword] = {"dev_thr": thr, "dev_frr": op and op["frr"], "test_positives": t["positives"],
                          "test_frr_at_dev_thr": tp["frr"], "test_fa_per_h_at_dev_thr": tp["fa_per_hour"],
                          "test_frr_own_thr": own["frr"], "test_fa_own_thr": own["fa_per_hour"], "own_thr": m.threshold,
                          **{k: t[k] for k in t if k.startswith("frr_at")}}
        tot_pos += t["positives"]; tot_miss += tp["missed"]
        print(f"{m.keyword:15s} dev thr {thr:.4f} dev miss {op and op['frr']}  TEST miss {tp['frr']*100:.1f} % FA/h {tp['fa_per_hour']:.2f} "
              f"| own thr {m.threshold:.3f}: miss {own['frr']*100:.1f} % FA/h {own['fa_per_hour']:.2f} | test oracle 0.5: {t['frr_at_0.5_fa_per_hour']}")
    print("summed test miss at dev thresholds:", tot_miss, "/", tot_pos, f"{100*tot_miss/max(1,tot_pos):.1f} %")
    json.dump(out, open(sets_dir / "eval_out.json", "w"), indent=1)
    base = BASE
    print("| keyword | test positives | own threshold: miss / FA/h | dev threshold: miss / FA/h | test oracle <= 0.5 FA/h | runtime search (llr, same negatives) | training (wall) |")
    print("|---|---:|---|---|---|---:|---:|")
    sums = {"own": 0, "dev": 0, "orc": 0, "n": 0}
    for m in models:
        o = out[m.keyword]; t = res["test"][3][m.keyword]
        orc = o["frr_at_0.5_fa_per_hour"]
        own_m = round(o["test_frr_own_thr"] * o["test_positives"]); dev_m = round(o["test_frr_at_dev_thr"] * o["test_positives"])
        orc_m = round(orc["frr"] * o["test_positives"]) if orc else o["test_positives"]
        sums["own"] += own_m; sums["dev"] += dev_m; sums["orc"] += orc_m; sums["n"] += o["test_positives"]
        print(f"| {m.keyword} | {o['test_positives']} | {o['test_frr_own_thr']*100:.1f} % / {o['test_fa_own_thr']:.1f} ({m.threshold:g}) | "
              f"{o['test_frr_at_dev_thr']*100:.1f} % / {o['test_fa_per_h_at_dev_thr']:.1f} ({o['dev_thr']:g}) | "
              f"{(orc['frr']*100 if orc else 100):.1f} % ({orc['threshold'] if orc else '-'}) | {base.get(m.keyword, float('nan'))} % | {m.info.get('trained_s')} s |")
    n = max(1, sums["n"])
    print(f"| summed | {sums['n']} | {100*sums['own']/n:.1f} % | {100*sums['dev']/n:.1f} % | {100*sums['orc']/n:.1f} % | | |")


def _peers_table(peers: list, peer_res: dict, sets_dir: Path) -> None:
    print("| openWakeWord model (peer) | test positives | FA/h at 0.5: negatives / + all Mycroft wake clips | "
          "dev-chosen threshold (<= 0.5 FA/h on dev): FA/h, negatives / + wake clips | test's lowest threshold at <= 0.5 FA/h |")
    print("|---|---:|---|---|---|")
    peer_out = {}
    for p in peers:
        figs = {h: [f[p.keyword] for f in peer_res[h]] for h in ("dev", "test")}
        dev_ok = [s for s in figs["dev"][0]["sweep"] if s["fa_per_hour"] <= 0.5]
        thr = min(s["threshold"] for s in dev_ok) if dev_ok else None
        row = {}
        for i, key in enumerate(("negatives", "with_wake_clips")):
            t = figs["test"][i]
            at = lambda th: next(s for s in t["sweep"] if s["threshold"] == th)
            ok = [s["threshold"] for s in t["sweep"] if s["fa_per_hour"] <= 0.5]
            row[key] = {"negative_hours": t["negative_hours"], "positives": t["positives"],
                        "at_0.5": at(0.5), "at_dev_thr": thr and at(thr), "test_lowest_thr": min(ok) if ok else None}
        peer_out[p.keyword] = {"model": p.path, "dev_thr": thr, **row}
        n, w = row["negatives"], row["with_wake_clips"]
        fa = lambda r, k: f"{r[k]['fa_per_hour']:.1f} ({r[k]['false_alarms']})" if r[k] else "-"
        print(f"| {p.keyword} ({Path(p.path).name}) | {n['positives']} | {fa(n, 'at_0.5')} / {fa(w, 'at_0.5')} | "
              f"{thr}: {fa(n, 'at_dev_thr')} / {fa(w, 'at_dev_thr')} | {n['test_lowest_thr']} / {w['test_lowest_thr']} |")
    print(f"test negatives {peer_out[peers[0].keyword]['negatives']['negative_hours']:.3f} h, with the wake clips "
          f"{peer_out[peers[0].keyword]['with_wake_clips']['negative_hours']:.3f} h; cells: FA/h (false alarms)")
    json.dump(peer_out, open(sets_dir / "oww_out.json", "w"), indent=1)


def wake_mycroft(model_paths: Sequence[str], oww: Sequence[str] | None = None, shared: Path | None = None,
                 sets_dir: Path = SETS, precision: str = "auto", verify: str | None = None,
                 verify_span: dict | None = None, talk: bool = False) -> None:
    """Score the trained models (and, ``oww`` not None, openWakeWord's: none given, the four bundled wake
    phrases) on both halves; print the figures and the tables, write the JSON under ``sets_dir``.  ``verify``:
    also each model followed by that second-pass model as a verifier (:func:`_verified_table`; ``verify_span``:
    ``verify_before_s`` / ``verify_after_s`` other than the config's; ``talk``: then :func:`talk_after`)."""
    import torch

    from ..model.wake import load_wake_model

    torch.set_num_threads(1)
    write_halves(shared or shared_root(), sets_dir)
    models = [load_wake_model(p) for p in model_paths]
    peers, scorer = [], None
    if oww is not None:
        from ..evaluation.oww import OwwScorer, PeerWakeModel, oww_keyword

        if not oww:
            import openwakeword

            d = Path(openwakeword.__file__).parent / "resources" / "models"
            oww = [str(d / f"{n}_v0.1.onnx") for n in OWW_BUNDLED]
        peers = [PeerWakeModel(oww_keyword(p), p) for p in oww]
        scorer = OwwScorer(list(oww))
    res, peer_res = _score(models, scorer, peers, sets_dir, precision)
    if models:
        _models_table(models, res, sets_dir)
        if verify:
            _verified_table(models, res, verify, sets_dir, verify_span or {})
            if talk:
                talk_after(models, verify, sets_dir)
    if peers:
        _peers_table(peers, peer_res, sets_dir)


def _verified_table(models: list, res: dict, name: str, sets_dir: Path, span: dict) -> None:
    """Each model followed by the second-pass model ``name`` as a verifier (:func:`streamd.evaluation.wake.
    verified_sweep`; the gap: log P(keyword) - log P(its own text) on the detection's audio, the span of
    :func:`streamd.model.wake.verify_span` with ``span``'s ``verify_before_s`` / ``verify_after_s``, else the config's):
    per keyword the pair of thresholds with the lowest dev miss at <= 0.5 FA/h (ties: the higher wake
    threshold, then the stricter verifier); one pair for all keywords (the lowest summed dev miss with every
    keyword at <= 0.5 FA/h); the configured pair (``engine.kws.verify_wake_threshold``, ``verify_gap``); their
    test figures, then the one pair for all through the engine (:func:`_through_engine`: a model whose file
    carries its own verifier threshold is verified at that one there, as the engine always does); with such
    files, :func:`_own_gaps_table`.  JSON in verify_out.json (with every verified detection: file, frame,
    positive, score, gap)."""
    from ..config import KwsConfig
    from ..decode.endpoint import seconds_to_frames
    from ..evaluation.wake import verified_sweep
    from ..second_pass.models import load_verifier

    kcfg = KwsConfig(**span)
    try:
        model = load_verifier(name)
    except ValueError as e:
        raise ValueError(f"--verify {e}") from None
    out: dict = {}
    ref = seconds_to_frames(REFRACTORY_S, FRAME_S)
    gaps: dict[tuple[int, str], Callable[[int, int], float]] = {}  # (model, half) -> its cached gap(file, frame)
    for k, m in enumerate(models):
        sweeps, asked, heard_as = {}, {}, {}
        for half in ("dev", "test"):
            ents, tracks, secs, _ = res[half]
            gaps[(k, half)] = gap = _gap_of(model, m.keyword, ents, kcfg)
            t0 = time.time()
            sweeps[half] = verified_sweep(k, m.keyword, ents, tracks, secs, gap, ref)
            cache = gap.cache  # type: ignore[attr-defined]
            asked[half] = (len(cache), round(time.time() - t0, 1))
            heard_as[half] = [[i, f, ents[i].keyword is not None, float(tracks[i][f, k]), g]
                              for (i, f), g in sorted(cache.items())]  # file, frame, positive, score, gap
        out[m.keyword] = {"verifications": asked, "sweeps": sweeps, "detections": heard_as}
        print(f"{m.keyword:15s} verifier calls dev / test {asked['dev'][0]} / {asked['test'][0]} "
              f"({asked['dev'][1]} / {asked['test'][1]} s)", file=sys.stderr)

    def point(kw: str, half: str, pair: tuple) -> dict:
        return next(p for p in out[kw]["sweeps"][half] if (p["wake_threshold"], p["gap"]) == pair)

    def within(p: dict) -> bool:
        return p["fa_per_hour"] is not None and p["fa_per_hour"] <= 0.5

    pairs = [(p["wake_threshold"], p["gap"]) for p in out[models[0].keyword]["sweeps"]["dev"] if p["gap"] is not None]
    shared = [pr for pr in pairs if all(within(point(m.keyword, "dev", pr)) for m in models)]
    shared_pair = min(shared, key=lambda pr: (sum(point(m.keyword, "dev", pr)["missed"] for m in models),
                                              -pr[0], -pr[1])) if shared else None
    config_pair = (kcfg.verify_wake_threshold, kcfg.verify_gap)
    engine = _through_engine(models, name, sets_dir, shared_pair or config_pair, span)
    print(f"one pair for all (dev): {shared_pair}; configured: {config_pair}")
    print("| keyword | test positives | own pair (dev-chosen): test miss / FA/h | one pair for all (dev) | "
          f"configured {config_pair[0]:g}, {config_pair[1]:g} | one pair for all, through the engine |")
    print("|---|---:|---|---|---|---|")
    tot = {"own": 0, "shared": 0, "config": 0, "engine": 0, "n": 0}

    def cell(p: dict | None) -> str:
        return "-" if p is None else f"{p['frr'] * 100:.1f} % / {p['fa_per_hour']:.1f} ({p['false_alarms']})"

    for m in models:
        ok = [p for p in out[m.keyword]["sweeps"]["dev"] if within(p)]
        own = min(ok, key=lambda p: (p["frr"], -p["wake_threshold"], -(p["gap"] if p["gap"] is not None else -1e9))
                  ) if ok else None
        own_t = point(m.keyword, "test", (own["wake_threshold"], own["gap"])) if own else None
        sh_t = point(m.keyword, "test", shared_pair) if shared_pair else None
        cf_t = point(m.keyword, "test", config_pair) if config_pair in pairs else None
        en = engine[m.keyword]
        out[m.keyword].update({"dev": own, "test": own_t, "shared": sh_t, "configured": cf_t, "engine": en})
        n = en["positives"]
        tot["n"] += n
        for key, p in (("own", own_t), ("shared", sh_t), ("config", cf_t), ("engine", en)):
            tot[key] += p["missed"] if p is not None else n
        own_s = f"{own['wake_threshold']:g}, {own['gap']}: " if own else ""
        print(f"| {m.keyword} | {n} | {own_s}{cell(own_t)} | {cell(sh_t)} | {cell(cf_t)} | {cell(en)} |")
    n = max(1, tot["n"])
    print(f"| summed | {tot['n']} | {100 * tot['own'] / n:.1f} % | {100 * tot['shared'] / n:.1f} % | "
          f"{100 * tot['config'] / n:.1f} % | {100 * tot['engine'] / n:.1f} % |")
    out["_pairs"] = {"shared": shared_pair, "configured": config_pair}
    out["_own"] = _own_gaps_table(models, res, gaps, kcfg.verify_wake_threshold, ref)
    json.dump(out, open(sets_dir / "verify_out.json", "w"), indent=1)


def _gap_of(model, keyword: str, ents: list, kcfg) -> Callable[[int, int], float]:
    """gap(file, frame): the verifier's gap for ``keyword`` at a detection of frame ``frame`` of file ``ents[i]``
    (its audio read once), cached in the function's ``cache`` ({(file, frame): gap})."""
    import numpy as np

    from ..evaluation.sets import load_entries
    from ..model.wake import verify_clip
    from ..second_pass.models import keyword_gap

    cache: dict = {}
    heard: dict[int, np.ndarray] = {}  # 16 kHz audio of the files with a detection, read once

    def gap(i: int, f: int) -> float:
        if (i, f) not in cache:
            if i not in heard:
                heard[i] = np.asarray(load_entries([ents[i]], RATE)[0][0], dtype=np.float32)
            w = verify_clip(heard[i], (f + 1) * FRAME_S, kcfg.verify_before_s, kcfg.verify_after_s)
            g = keyword_gap(model, w, keyword)
            cache[(i, f)] = -float("inf") if g is None else g
        return cache[(i, f)]

    gap.cache = cache  # type: ignore[attr-defined]
    return gap


OWN_FLOORS = (-14.0, -13.0, -12.0, -11.0, -10.0, -9.0, -8.0, -7.0, -6.0)
OWN_MARGINS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
OWN_RANKS = (1, 2, 3)
"""The rules :func:`_own_gaps_table` tries on the dev half: ``max(floor, the rank-th highest held-out negative
gap + margin)`` (:func:`streamd.model.wake.own_gap`)."""


def _own_gaps_table(models: list, res: dict, gaps: dict, wake_threshold: float, ref: int) -> dict:
    """Models whose files carry their own verifier threshold (``streamd wake verifier-gap``): the rule's (floor,
    margin, rank) with the lowest summed dev miss at <= 0.5 FA/h for every keyword (from each file's highest
    held-out negative gaps; ties: the higher floor, the larger margin, the lower rank), and the test figures
    of the chosen rule and of the thresholds the files carry (at ``wake_threshold``)."""
    from ..evaluation.wake import verified_sweep
    from ..model.wake import own_gap

    have = [(k, m) for k, m in enumerate(models) if m.verify_gap is not None]
    if not have:
        return {}

    def point(k: int, m, half: str, thr: float) -> dict:
        ents, tracks, secs, _ = res[half]
        return verified_sweep(k, m.keyword, ents, tracks, secs, gaps[(k, half)], ref, (wake_threshold,), (thr,))[0]

    def top(m) -> list[float]:
        return [float(x) for x in (m.info.get("verifier") or {}).get("top_negative_gaps", [])]

    grid = []
    for floor in OWN_FLOORS:
        for margin in OWN_MARGINS:
            for rank in OWN_RANKS:
                pts = [point(k, m, "dev", own_gap(top(m), floor, margin, rank)) for k, m in have]
                if all(p["fa_per_hour"] is not None and p["fa_per_hour"] <= 0.5 for p in pts):
                    grid.append((sum(p["missed"] for p in pts), -floor, -margin, rank, floor, margin))
    best = min(grid) if grid else None
    chosen = (best[4], best[5], best[3]) if best else None
    print(f"own verifier thresholds: the rule chosen on dev (floor, margin, rank) {chosen}")
    print("| keyword | highest held-out negative gaps | threshold in the file | test: miss / FA/h | "
          "dev rule's threshold | its test miss / FA/h |")
    print("|---|---:|---:|---|---:|---|")
    rows, n, miss_file, miss_rule = {}, 0, 0, 0
    for k, m in have:
        pf = point(k, m, "test", m.verify_gap)
        thr = own_gap(top(m), *chosen) if chosen else None
        pr = point(k, m, "test", thr) if chosen else None
        n += pf["positives"]
        miss_file += pf["missed"]
        miss_rule += pr["missed"] if pr else pf["positives"]
        rows[m.keyword] = {"top_negative_gaps": top(m), "file": m.verify_gap, "file_test": pf, "rule": thr,
                           "rule_test": pr, "rule_dev": point(k, m, "dev", thr) if chosen else None}
        rule = "-" if pr is None else f"{thr:.2f} | {pr['frr'] * 100:.1f} % / {pr['fa_per_hour']:.1f}"
        print(f"| {m.keyword} | {', '.join(f'{x:.2f}' for x in top(m)[:3])} | {m.verify_gap:.2f} | {pf['frr'] * 100:.1f} % / "
              f"{pf['fa_per_hour']:.1f} | {rule} |")
    print(f"| summed | | | {100 * miss_file / max(1, n):.1f} % | | {100 * miss_rule / max(1, n):.1f} % |")
    return {"chosen": chosen, "grid": [(g[4], g[5], g[3], g[0]) for g in sorted(grid)], "models": rows}


def _through_engine(models: list, name: str, sets_dir: Path, pair: tuple[float, float], span: dict) -> dict:
    """The test half through the shipped model's engine with the wake models verified by ``name``
    (``engine.kws`` with ``verify: true`` and ``pair`` as ``verify_wake_threshold``, ``verify_gap``; the second
    pass in line, as ``streamd transcribe``; ``span``: ``verify_before_s`` / ``verify_after_s``): per keyword :func:`~streamd.evaluation.kws.kws_counts` of the
    detections that stand, with ``positives``."""
    import numpy as np

    from ..config import EngineConfig, KwsConfig, SecondPassConfig
    from ..engine import Recognizer
    from ..evaluation.kws import kws_counts
    from ..evaluation.sets import load_entries, read_eval_set
    from ..evaluation.wake import file_roles
    from ..events import WakeWord
    from ..feed import feed_streams
    from ..paths import default_model_path
    from ..second_pass.calibration import second_pass_for

    cfg = EngineConfig(num_threads=1, kws=KwsConfig(wake_models=tuple(m.path for m in models), verify=True,
                                                    verify_wake_threshold=pair[0], verify_gap=pair[1], **span),
                       second_pass=SecondPassConfig(model=name))
    rec = Recognizer.from_checkpoint(str(default_model_path()), cfg)
    second = second_pass_for(cfg, rec.calibration is not None)
    ents = [e for s in ("mycroft", "sc", "kwsdev") for e in read_eval_set(sets_dir / f"test_{s}.jsonl")[0]]
    audio = load_entries(ents, None)
    secs = [len(x) / r for x, r in audio]
    t0 = time.time()
    names = {m.keyword for m in models}
    stood: list[list[WakeWord]] = [[] for _ in ents]
    asked = 0

    def on_event(i: int, ev) -> None:
        nonlocal asked
        if isinstance(ev, WakeWord) and ev.keyword in names:
            asked += 1
            stood[i] += [w for w in second.apply_events([ev]) if w.stands]

    feed_streams(rec, [(np.asarray(x, dtype=np.float32), r) for x, r in audio], piece_seconds=0.32,
                 on_event=on_event, partials=False)
    print(f"through the engine: {round(sum(secs))} s of audio, {asked} detections verified, "
          f"{round(time.time() - t0)} s", file=sys.stderr)
    figs = {}
    for m in models:
        sel, sel_ents, neg_h = file_roles(m.keyword, ents, secs)
        dets = [[w for w in stood[i] if w.keyword == m.keyword] for i in sel]
        figs[m.keyword] = {"positives": sum(e.keyword is not None for e in sel_ents),
                           **kws_counts(dets, sel_ents, neg_h)}
    return figs


TALK_WORDS = ("stop", "go", "up", "down", "left", "right", "on", "off", "yes", "no")
"""The Speech Commands words :func:`talk_after` says after each keyword."""


def talk_after(models: list, name: str, sets_dir: Path, words: int = 3, seed: int = 0) -> dict:
    """Each model's test-half Mycroft positives with talk right after the keyword: the clip cut 50 ms after
    its last sample above 5 % of its peak, then ``words`` Speech Commands dev words of other speakers
    (:data:`TALK_WORDS`, drawn with ``seed``), each cut to 50 ms around its speech.  Per keyword and for the
    clips alone and with talk: how many the wake model fires on at ``engine.kws.verify_wake_threshold`` and
    how many of those the verifier ``name`` passes at ``verify_gap`` (any detection of the clip)."""
    import numpy as np

    from ..config import KwsConfig
    from ..decode.endpoint import seconds_to_frames
    from ..evaluation.sets import load_entries, read_eval_set
    from ..evaluation.wake import detect_frames, score_tracks
    from ..model.wake import WakeScorer, verify_clip
    from ..second_pass.models import keyword_gap, load_recognizer

    kcfg = KwsConfig()
    model = load_recognizer(name, cpu_threads=1, int8=True)
    rng = np.random.default_rng(seed)

    def at16k(entries) -> list:
        return [np.asarray(x, np.float32) for x, _ in load_entries(entries, RATE)]

    def speech(x: np.ndarray) -> tuple[int, int]:
        on = np.nonzero(np.abs(x) > 0.05 * np.abs(x).max())[0] if x.size else np.zeros(0, int)
        return (int(on[0]), int(on[-1])) if on.size else (0, x.size)

    cmds = [e for e in read_eval_set(sets_dir / "test_sc.jsonl")[0] if e.text in TALK_WORDS]
    cmd_audio = at16k(cmds)
    out: dict = {}
    for m in models:
        ents = [e for e in read_eval_set(sets_dir / "test_mycroft.jsonl")[0] if e.keyword == m.keyword]
        alone = at16k(ents)
        talk = []
        for x in alone:
            parts = [x[:speech(x)[1] + 800]]
            for _ in range(words):
                c = cmd_audio[int(rng.integers(len(cmd_audio)))]
                a, b = speech(c)
                parts.append(c[max(0, a - 800):b + 800])
            talk.append(np.concatenate(parts))
        row = {"positives": len(alone)}
        for tag, clips in (("alone", alone), ("talk", talk)):
            tracks = score_tracks(WakeScorer([m]), [(c, RATE) for c in clips])
            fired = passed = 0
            for c, tr in zip(clips, tracks):
                frames = detect_frames(tr[:, 0], kcfg.verify_wake_threshold, seconds_to_frames(REFRACTORY_S, FRAME_S))
                fired += bool(frames)
                for f in frames:
                    g = keyword_gap(model, verify_clip(c, (f + 1) * FRAME_S, kcfg.verify_before_s,
                                                       kcfg.verify_after_s), m.keyword)
                    if g is not None and g >= kcfg.verify_gap:  # (a gap of 0.0 passes)
                        passed += 1
                        break
            row[tag] = {"fired": fired, "passed": passed}
        out[m.keyword] = row
        print(f"{m.keyword:15s} talk after: {row}", file=sys.stderr)
    n = sum(r["positives"] for r in out.values())
    print("| keyword | positives | keyword alone: fired / verified | talk after it: fired / verified |")
    print("|---|---:|---|---|")
    for kw, r in out.items():
        print(f"| {kw} | {r['positives']} | {r['alone']['fired']} / {r['alone']['passed']} | "
              f"{r['talk']['fired']} / {r['talk']['passed']} |")
    for tag in ("alone", "talk"):
        p = sum(r[tag]["passed"] for r in out.values())
        print(f"{tag}: verified {p} of {n} ({100 * (n - p) / max(1, n):.1f} % missed)")
    json.dump(out, open(sets_dir / "talk_out.json", "w"), indent=1)
    return out
