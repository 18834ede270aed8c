"""Chapter 6's claims: the book's pre-registered hypotheses (``data/papers/06_cross_lens.yaml``) as predicates.

``METRIC_KEYS`` (every key the page records), ``CONTROL_PP`` (the SDE control's gate), ``JUDGED``
(the profiles judged), one predicate per hypothesis (noise bands from :mod:`memlab.science.metrics`,
computed here from the recorded metrics) and :func:`claims`, which pairs each hypothesis of the
YAML with its predicate.
"""
from __future__ import annotations

import math

import numpy as np

from memlab.report import paper
from memlab.science import metrics

from .spec import CHAPTER, ILLUSION_PP, hypotheses

CONTROL_PP = 50.0  # pre-registered: OTR(Retrain) - OTR(Original) needed for SDE to be trusted
JUDGED = ("cpu", "paper")  # the profiles at which the hypotheses are judged

# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.report.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    "sde_feature", "sde_sizes", "n_forget", "illusion_set", "vision", "vision_wall_s",
    "lm_runs", "lm_audit_method", "audit_k", "k_values", "lm_ref_bits", "lm_wall_s",
    "tau_vision", "tau_lm", "tau_tests", "n_boot", "preregistration", "published_gaps",
)


def _half(r: dict) -> float:
    return (r["high"] - r["low"]) / 2.0


def _bn(m) -> dict:
    return m["vision"]["bn"]


def _control(m) -> tuple[float, float, float, int]:
    t, n = _bn(m), int(m["sde_sizes"]["targets"])
    o, r = t["Original"]["OTR before"] / 100.0, t["Retrain"]["OTR before"] / 100.0
    return r - o - CONTROL_PP / 100.0, o, r, n


def _sde_control(m):
    margin, o, r, n = _control(m)
    band = metrics.diff_band(r, n, o, n)
    paper.outside_noise(margin, band, f"OTR(Retrain) - OTR(Original) - {CONTROL_PP:g} pp")
    return margin > 0, (f"OTR Retrain {100 * r:.0f}%, Original {100 * o:.0f}% ({n} targets each); margin "
                        f"{100 * margin:+.0f} pp, band ±{100 * band:.0f} pp")


def _require_control(m) -> None:
    margin, o, r, _ = _control(m)
    if margin <= 0:
        raise paper.NotJudged(f"precondition failed: SDE does not tell the Original from Retrain (out-of-training "
                              f"rate Retrain {100 * r:.0f}% vs Original {100 * o:.0f}%; needs a gap of {CONTROL_PP:g} pp)")


def _illusion(m) -> list[str]:
    ill = list(m["illusion_set"])
    if not ill:
        raise paper.NotJudged(f"no BatchNorm method has ΔF >= {ILLUSION_PP:g} pp in this run (empty illusion set)")
    return ill


def _sees_through(m):
    ill, t = _illusion(m), _bn(m)
    _require_control(m)
    inside = [k for k in ill if t[k]["OTR before"] <= 50.0]
    share = len(inside) / len(ill)
    return share >= 0.5, (f"{len(inside)} of {len(ill)} illusion-set methods judged in training before "
                          "recalibration; OTR " + ", ".join(f"{k} {t[k]['OTR before']:.0f}%" for k in ill))


def _recal_sde(m):
    ill, t = _illusion(m), _bn(m)
    _require_control(m)
    n = int(m["sde_sizes"]["targets"]) * len(ill)
    before = float(np.mean([t[k]["OTR before"] for k in ill])) / 100.0
    after = float(np.mean([t[k]["OTR after"] for k in ill])) / 100.0
    band = metrics.diff_band(before, n, after, n)
    paper.outside_noise(before - after, band, "mean OTR before - after")
    return before > after, (f"mean OTR of the illusion set {100 * before:.0f}% before, {100 * after:.0f}% after "
                            f"recalibration (band ±{100 * band:.0f} pp over {n} targets)")


def _recal_asr(m):
    ill, t = _illusion(m), _bn(m)
    n = int(m["n_forget"]) * len(ill)
    before = float(np.mean([t[k]["ASR before"] for k in ill]))
    after = float(np.mean([t[k]["ASR after"] for k in ill]))
    band = metrics.diff_band(before, n, after, n)
    paper.outside_noise(before - after, band, "mean ASR before - after")
    return before > after, f"mean ASR of the illusion set {before:.2f} before, {after:.2f} after (band ±{band:.2f})"


def _gn_unmoved(m):
    g = m["vision"]["gn"]
    d_otr = max(abs(r["OTR after"] - r["OTR before"]) for r in g.values())
    d_asr = max(abs(r["ASR after"] - r["ASR before"]) for r in g.values())
    return d_otr == 0 and d_asr == 0, f"max |ΔOTR| {d_otr:.1f} pp, max |ΔASR| {d_asr:.3f} over {len(g)} GroupNorm models"


def _run(m, method: str, k) -> dict:
    return m["lm_runs"][method][str(k)]


def _k0(m) -> dict:
    return _run(m, m["lm_audit_method"], 0)


def _k0_share(m) -> float:
    b = np.asarray(_k0(m)["bits"])
    return float(np.mean(b > 0))


def _k0_bits(m):
    b = np.asarray(_k0(m)["bits"])
    share = _k0_share(m)
    return share >= 0.9, (f"{int(np.sum(b > 0))} of {len(b)} authors hold bits at K=0; total {b.sum():.0f} bits "
                          f"(median {np.median(b):.1f} per author)")


def _require_k0(m) -> None:
    if _k0_share(m) < 0.9:
        raise paper.NotJudged(f"precondition failed: only {100 * _k0_share(m):.0f}% of authors hold canary bits "
                              "before unlearning (K=0; needs 90%)")


def _bits_share(m, run: dict, n_boot: int, seed: int) -> dict:
    pair = np.stack([np.asarray(_k0(m)["bits"]), np.asarray(run["bits"])], axis=1)
    lo, hi = metrics.bootstrap_ci(pair, stat=lambda a: a[:, 1].sum() / max(a[:, 0].sum(), 1e-12), n_boot=n_boot,
                                  seed=seed)
    return {"share": float(pair[:, 1].sum() / pair[:, 0].sum()), "low": lo, "high": hi}


def _npo_keeps(m):
    _require_k0(m)
    k = m["audit_k"]
    run, k0 = _run(m, "NPO", k), _run(m, "NPO", 0)
    s = _bits_share(m, run, int(m["n_boot"]), 0)
    if k0["out_acc"] == 0:
        raise paper.NotJudged("out acc is 0 at K=0: no answer to remove")
    out_share = run["out_acc"] / k0["out_acc"]
    paper.outside_noise(s["share"] - 0.5, _half(s), "bits share - 0.5")
    return s["share"] >= 0.5 and s["share"] > out_share, (
        f"at the audited K={k}: bits keep {s['share']:.2f} [{s['low']:.2f}, {s['high']:.2f}] of K=0, "
        f"out acc keeps {out_share:.2f} ({k0['out_acc']:.2f} -> {run['out_acc']:.2f})")


def _ga_removes(m):
    _require_k0(m)
    k = max(int(x) for x in m["lm_runs"]["GA"])
    ga, np_ = _run(m, "GA", k), _run(m, "NPO", k)
    s = _bits_share(m, ga, int(m["n_boot"]), 0)
    paper.outside_noise(0.25 - s["share"], _half(s), "0.25 - GA bits share")
    return s["share"] <= 0.25 and ga["bits_total"] < np_["bits_total"], (
        f"GA at K={k} keeps {s['share']:.2f} [{s['low']:.2f}, {s['high']:.2f}] of the K=0 bits "
        f"({ga['bits_total']:.0f} bits; NPO {np_['bits_total']:.0f})")


def _mia_k0(m):
    auc = _k0(m)["auc"]
    low = min(auc.values())
    return low >= 0.8, "AUC at K=0: " + ", ".join(f"{s} {v:.2f}" for s, v in auc.items())


def _mia_npo(m):
    k = m["audit_k"]
    kg = max(int(x) for x in m["lm_runs"]["GA"])
    a_npo, a_ga = _run(m, "NPO", k)["auc"]["Reference"], _run(m, "GA", kg)["auc"]["Reference"]
    return a_npo >= 0.7 and a_npo > a_ga, f"reference AUC: NPO K={k} {a_npo:.2f}, GA K={kg} {a_ga:.2f}"


def _test(m, key: str) -> dict:
    return m["tau_tests"][key]


def _ranked(r: dict, what: str) -> None:
    # A lens that gives every item the same value ranks nothing: the hypothesis cannot be decided.
    # (NaN in the notebook, None once saved to JSON)
    if any(k in r and (r[k] is None or math.isnan(r[k])) for k in ("tau", "tau_xy", "tau_xz")):
        raise paper.NotJudged(f"{what}: a lens has the same value for all {r['n']} items, so it ranks nothing")


def _tau_pos(key: str, what: str):
    def check(m):
        r = _test(m, key)
        _ranked(r, what)
        return r["low"] > 0, f"{what}: tau {r['tau']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] over {r['n']} items"
    return check


def _tau_diff(key: str, what: str):
    def check(m):
        r = _test(m, key)
        _ranked(r, what)
        paper.outside_noise(r["diff"], _half(r), what)
        return r["diff"] > 0, f"{what} = {r['diff']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] over {r['n']} items"
    return check


_CHECKS = {
    "sde_control": _sde_control, "sde_sees_through": _sees_through, "recal_moves_sde": _recal_sde,
    "recal_moves_asr": _recal_asr, "gn_unmoved": _gn_unmoved, "k0_bits": _k0_bits, "npo_keeps_bits": _npo_keeps,
    "ga_removes_bits": _ga_removes, "mia_k0": _mia_k0, "mia_npo_persists": _mia_npo,
    "vision_postf_reauc": _tau_pos("vision_postf_reauc", "tau(Post-F, ReAUC)"),
    "vision_pref_worse": _tau_diff("vision_pref_worse", "tau(Post-F, ReAUC) - tau(Pre-F, ReAUC)"),
    "vision_sde_agrees": _tau_pos("vision_sde_agrees", "tau(SDE in-training rate after recalibration, Post-F)"),
    "lm_bits_tf": _tau_diff("lm_bits_tf", "tau(bits, tf top-1) - tau(bits, out acc)"),
}


def claims():
    """The book's pre-registered hypotheses as claims (text and order from the YAML), judged at cpu and paper."""
    hyp = hypotheses()
    missing, extra = sorted(set(hyp) - set(_CHECKS)), sorted(set(_CHECKS) - set(hyp))
    if missing or extra:
        raise ValueError(f"data/papers/{CHAPTER}.yaml and the chapter's checks disagree: no check for {missing}, "
                         f"no hypothesis for {extra}")
    return paper.declare(METRIC_KEYS, [
        paper.Claim(key, h["text"], f"Hypothesis, question {h['question']} (predicted: {h['predicted']})",
                    _CHECKS[key], profiles=JUDGED, sanity=bool(h.get("sanity", False)))
        for key, h in hyp.items()
    ])
