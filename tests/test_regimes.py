"""Regime gates (issue 29): a claim is judged only inside the regime its paper tested it in.

The loader's errors, the gate's verdicts on constructed runs just inside and just outside a
bound, and every surface that counts or shows verdicts (tallies, scorecard, claims table,
findings, closing summary, the regimes table, the sweep figure, the book's CSS and legends).
"""
import json
import re

import pytest
import yaml

from memlab.core import chapters
from memlab.core.config import repo_root
from memlab.report import book, pagekit, paper, sweep_summary

GATE = {
    "text": "The Original knows the forget class as the paper's does (forget-class accuracy at least 90 %)",
    "why": "Table 1: the paper's Original reaches 98.6 % on the forget class.",
    "requires": [{"metric": "regime/Original/forget_acc", "at_least": 90,
                  "label": "Original forget-class accuracy (%)"}],
    "claims": ["gap", "trend"],
    "decide": "ResNet-18 width 64 trained 30 epochs on full CIFAR-10 (the paper profile)",
    "decide_cost": {"cpu_2core_min": 600, "gpu_min": 8},
}
NLL_GATE = {
    "text": "The base model beats a unigram model on the fine-tuning text",
    "why": "Section 4: the paper's base models are fluent on the fine-tuning domain.",
    "requires": [{"metric": "base/nll", "at_most": 7.06, "label": "base NLL (nats)"}],
    "claims": ["skew"],
}


def _claims():
    """A chapter-like set: two claims under one gate, one under an at_most gate, one ungated, a sanity check."""
    return paper.declare(["x", "regime", "base"], [
        paper.Claim("gap", "The gap is above 1", "Table 1", lambda m: (m["x"] > 1, f"gap {m['x']}")),
        paper.Claim("trend", "The trend is inside its noise", "Fig. 2",
                    lambda m: paper.outside_noise(m["x"], 5.0, "trend") or (True, "")),
        paper.Claim("skew", "Members skew right", "Table 3", lambda m: (m["x"] > 0, f"skew {m['x']}")),
        paper.Claim("free", "A claim without a gate", "Table 4", lambda m: (m["x"] > 1, f"free {m['x']}")),
        paper.Claim("arith", "The law's arithmetic", "Table 2", lambda m: (True, "exact"), sanity=True),
        paper.Claim("big", "Needs the paper profile", "Fig. 5", lambda m: (True, ""), profiles=("paper",)),
    ])


REGIMES = {"trained_original": GATE, "fluent_base": NLL_GATE}
REASONS = {"gap": "Our models are small.", "skew": "Our base is weak.", "free": "No reason needed."}


def _run(acc, nll=7.0, x=0.5, profile="cpu"):
    metrics = {"x": x, "regime": {"Original": {"forget_acc": acc}}, "base": {"nll": nll}}
    return {v["key"]: v for v in paper.evaluate(_claims(), metrics, profile, reasons=REASONS, regimes=REGIMES)}


# ----------------------------------------------------------------------------- the loader

def _yaml(tmp_path, monkeypatch, regimes):
    monkeypatch.setattr(paper, "papers_dir", lambda: tmp_path)
    (tmp_path / "99_x.yaml").write_text(yaml.safe_dump({"regimes": regimes}, sort_keys=False))


def test_a_valid_section_loads_as_written(tmp_path, monkeypatch):
    _yaml(tmp_path, monkeypatch, REGIMES)
    assert paper.regimes("99_x") == REGIMES
    (tmp_path / "99_x.yaml").write_text(yaml.safe_dump({"reasons": {}}))
    assert paper.regimes("99_x") == {}  # a chapter without gates


def _with(**change):
    reg = {k: v for k, v in GATE.items() if change.get(k, "") is not None}
    reg.update({k: v for k, v in change.items() if v is not None})
    return reg


def _req(**change):
    req = dict(GATE["requires"][0], **change)
    return [{k: v for k, v in req.items() if v is not None}]


@pytest.mark.parametrize("regime, match", [
    (_with(gates=["x"]), r"unknown keys \['gates'\].*allowed: text, why, requires, claims"),
    (_with(text=None), r"missing \['text'\]"),
    (_with(why=None), r"missing \['why'\]"),
    (_with(requires=None), r"missing \['requires'\]"),
    (_with(claims=None), r"missing \['claims'\]"),
    (_with(text="  "), r"'text' must be a non-empty sentence"),
    (_with(requires=[]), r"'requires' must be a non-empty list"),
    (_with(requires=_req(at_most=95)), r"exactly one of at_least / at_most \(got at_least and at_most\)"),
    (_with(requires=_req(at_least=None)), r"exactly one of at_least / at_most \(got neither\)"),
    (_with(requires=_req(at_least="90")), r"at_least must be a number \(got '90'\)"),
    (_with(requires=_req(at_least=True)), r"at_least must be a number \(got True\)"),
    (_with(requires=_req(label=None)), r"'label' must be a non-empty string"),
    (_with(requires=_req(unit="%")), r"unknown keys \['unit'\]"),
    (_with(claims="gap"), r"'claims' must be a non-empty list of claim keys"),
    (_with(decide_cost={"cpu_min": 3}), r"'decide_cost' must map cpu_2core_min and/or gpu_min"),
])
def test_a_malformed_regime_is_one_error_naming_the_file_the_regime_and_what_is_allowed(
        tmp_path, monkeypatch, regime, match):
    _yaml(tmp_path, monkeypatch, {"trained_original": regime})
    with pytest.raises(ValueError, match=r"data/papers/99_x\.yaml: regime 'trained_original'.*" + match):
        paper.regimes("99_x")


def test_a_claim_in_two_regimes_and_a_name_that_is_not_snake_case_are_errors(tmp_path, monkeypatch):
    _yaml(tmp_path, monkeypatch, {"trained_original": GATE, "again": dict(NLL_GATE, claims=["skew", "gap"])})
    with pytest.raises(ValueError, match=r"99_x\.yaml: claim 'gap' is gated by regimes 'trained_original' "
                                         r"and 'again'; a claim may be in one regime only"):
        paper.regimes("99_x")
    _yaml(tmp_path, monkeypatch, {"Trained-Original": GATE})
    with pytest.raises(ValueError, match="regime 'Trained-Original': a regime name must be snake_case"):
        paper.regimes("99_x")


def test_a_regime_naming_an_unknown_claim_or_a_sanity_check_is_an_error():
    with pytest.raises(ValueError, match=r"regime 'trained_original' gates unknown claim keys \['gapp'\]"):
        paper.evaluate(_claims(), {}, "cpu", regimes={"trained_original": dict(GATE, claims=["gapp"])})
    with pytest.raises(ValueError, match=r"gates sanity checks \['arith'\]"):
        paper.evaluate(_claims(), {}, "cpu", regimes={"trained_original": dict(GATE, claims=["arith"])})


def test_every_chapters_gates_name_its_claims():
    """The committed yaml of every chapter: its gates load and name claim keys the chapter has."""
    import importlib

    for cid, ch in chapters.CHAPTERS.items():
        regimes = paper.regimes(cid)
        if not regimes:
            continue
        mod = importlib.import_module(f"memlab.experiments.ch{cid}")
        rows = paper.evaluate(mod.claims(), {}, "cpu", regimes=regimes)  # raises on a typo
        gated = {k for r in regimes.values() for k in r["claims"]}
        assert gated <= {r["key"] for r in rows}, cid


# ----------------------------------------------------------------------------- the gate's verdicts

def test_a_gate_just_holding_leaves_the_verdict_to_the_claims_own_check():
    v = _run(acc=90.0)  # exactly at the bound: inside
    assert v["gap"]["verdict"] == paper.NOT_REPRODUCED and v["gap"]["evidence"] == "gap 0.5"
    assert v["gap"]["reason"] == "Our models are small." and "ungated" not in v["gap"]
    assert v["trend"]["verdict"] == paper.NOT_JUDGED
    assert v["gap"]["regime"] == {"name": "trained_original", "text": GATE["text"], "why": GATE["why"],
                                  "holds": True, "measured": [{"label": "Original forget-class accuracy (%)",
                                                               "metric": "regime/Original/forget_acc",
                                                               "value": 90.0, "at_least": 90}]}
    assert _run(acc=91.0, x=2.0)["gap"]["verdict"] == paper.REPRODUCED


@pytest.mark.parametrize("x", [0.5, 2.0])  # whatever the claim's own verdict
def test_a_gate_just_failing_makes_the_claim_outside_the_regime_never_not_reproduced(x):
    v = _run(acc=89.99, x=x)
    own = paper.REPRODUCED if x > 1 else paper.NOT_REPRODUCED
    for key in ("gap", "trend"):
        assert v[key]["verdict"] == paper.OUTSIDE_REGIME and v[key]["regime"]["holds"] is False
        assert "reason" not in v[key]  # a reason explains a *not reproduced* claim only
    assert v["gap"]["ungated"] == {"verdict": own, "evidence": f"gap {x}"}
    assert v["trend"]["ungated"]["verdict"] == paper.NOT_JUDGED
    assert v["gap"]["evidence"] == ("Original forget-class accuracy 89.99%, the paper's regime needs at least "
                                    "90% (0.01 points below)")
    # the other gate and the ungated claim are judged as ever
    assert v["skew"]["verdict"] == (paper.REPRODUCED if x > 0 else paper.NOT_REPRODUCED)
    assert v["free"]["verdict"] == own and "regime" not in v["free"]


def test_an_at_most_gate_fails_just_above_its_bound_and_names_the_unit():
    assert _run(acc=95, nll=7.06)["skew"]["regime"]["holds"] is True
    v = _run(acc=95, nll=7.14)["skew"]
    assert v["verdict"] == paper.OUTSIDE_REGIME
    assert v["evidence"] == "base NLL 7.14 nats, the paper's regime needs at most 7.06 nats (0.08 nats above)"
    # a value that rounds to its bound still prints as a value past it
    near = _run(acc=89.99996)["gap"]["evidence"]
    assert near.startswith("Original forget-class accuracy 89.99996%,")


@pytest.mark.parametrize("value", [float("nan"), None])  # None: a NaN that went through JSON
def test_an_undefined_gate_metric_fails_the_gate(value):
    v = _run(acc=value)["gap"]
    assert v["verdict"] == paper.OUTSIDE_REGIME and v["regime"]["measured"][0]["value"] is None
    assert v["evidence"] == ("Original forget-class accuracy undefined on this run (not a number), "
                             "the paper's regime needs at least 90%")


def test_a_gate_metric_the_run_did_not_produce_makes_the_claim_not_run():
    metrics = {"x": 0.5, "base": {"nll": 7.0}}
    v = {r["key"]: r for r in paper.evaluate(_claims(), metrics, "cpu", regimes=REGIMES)}
    assert v["gap"]["verdict"] == paper.NOT_RUN and v["gap"]["regime"]["holds"] is None
    assert v["gap"]["evidence"] == ("Original forget-class accuracy not produced at this profile "
                                    "(the regime gate needs it)")
    assert v["gap"]["ungated"]["verdict"] == paper.NOT_REPRODUCED
    assert v["skew"]["verdict"] == paper.REPRODUCED and v["skew"]["regime"]["holds"] is True  # its own gate


def test_the_check_runs_first_and_profile_not_run_claims_are_not_gated():
    def broken(m):
        return 1 / 0, ""

    claims = [paper.Claim("gap", "x", "T", broken), paper.Claim("trend", "y", "T", lambda m: (True, ""),
                                                                 profiles=("paper",))]
    with pytest.raises(ZeroDivisionError):  # a bug surfaces even where the gate would fail
        paper.evaluate(claims, {"regime": {"Original": {"forget_acc": 10}}}, "cpu",
                       regimes={"trained_original": GATE})
    v = paper.evaluate(claims[1:], {"regime": {"Original": {"forget_acc": 10}}}, "cpu",
                       regimes={"trained_original": dict(GATE, claims=["trend"])})[0]
    assert v["verdict"] == paper.NOT_RUN and "regime" not in v and "ungated" not in v


def test_a_gate_on_a_metric_that_is_not_a_number_is_a_bug():
    with pytest.raises(ValueError, match=r"metric 'regime/Original/forget_acc' is not a number \(got dict\)"):
        paper.evaluate(_claims(), {"x": 1, "regime": {"Original": {"forget_acc": {"a": 1}}}, "base": {"nll": 1}},
                       "cpu", regimes=REGIMES)


# ----------------------------------------------------------------------------- what readers see

def test_counts_and_the_scorecard_count_outside_the_regime_apart(tmp_path, monkeypatch):
    rows = list(_run(acc=65.6).values())
    n = pagekit.counts(rows)
    assert n[paper.OUTSIDE_REGIME] == 2 and n[paper.NOT_REPRODUCED] == 1 and n[paper.NOT_JUDGED] == 0
    assert n[paper.NOT_RUN] == 1 and n["sanity"] == 1
    assert "2 outside the paper's regime" in pagekit.counts_sentence(n)
    assert "seed-dependent" not in pagekit.counts_sentence(n)  # named only where some claim has it
    glued = {}
    monkeypatch.setattr(pagekit, "_glue", lambda name, value: glued.__setitem__(name, value))
    pagekit.glue_counts("99_x", rows)
    assert glued["99_x-n-outside-regime"] == 2 and glued["99_x-n-not-reproduced"] == 1

    fake = {"01_p": chapters.Chapter("01_p", "A paper chapter", "x", "p.txt"),
            "02_q": chapters.Chapter("02_q", "Old results", "y", "q.txt")}
    monkeypatch.setattr(book, "CHAPTERS", fake)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "01_p.json").write_text(json.dumps({"profile": "cpu", "claims": rows}))
    old = [{"claim": "c", "source": "s", "verdict": paper.NOT_REPRODUCED, "evidence": ""}]  # no gates, no kind
    (tmp_path / "results" / "02_q.json").write_text(json.dumps({"profile": "cpu", "claims": old}))
    book.write_scorecard(tmp_path)
    summary = (tmp_path / "_scorecard_summary.md").read_text()
    assert ("| Chapter | Profile | Reproduced | Not reproduced in regime | Outside the paper's regime | "
            "Not judged within noise | Not run at this profile | Sanity checks passed |") in summary
    assert "| A paper chapter | `cpu` | 1 | 1 | 2 | 0 | 1 | 1 of 1 |" in summary
    assert "| Old results | `cpu` | 0 | 1 | 0 | 0 | 0 | – |" in summary
    # the same verdicts in words, on the front page and atop the scorecard
    holds = (tmp_path / "_what_holds.md").read_text()
    assert holds.startswith("**[1. A paper chapter](chapters/01_p.ipynb)** (profile cpu, single-seed verdicts).")
    assert "2 claims (" in holds and "lie outside the paper's regime" in holds
    assert "**[2. Old results](chapters/02_q.ipynb)** (profile cpu, single-seed verdicts). Did not hold" in holds
    assert holds in (tmp_path / "scorecard.md").read_text()
    pooled = old + [{"claim": "d", "source": "s", "verdict": paper.SEED_DEPENDENT, "evidence": ""}]
    (tmp_path / "results" / "02_q.json").write_text(json.dumps({"profile": "cpu", "claims": pooled}))
    book.write_scorecard(tmp_path)
    summary = (tmp_path / "_scorecard_summary.md").read_text()
    assert "| Not judged within noise | Seed-dependent | Not run at this profile |" in summary
    assert "| Old results | `cpu` | 0 | 1 | 0 | 0 | 1 | 0 | – |" in summary


_LEAKS = re.compile(r"trained_original|fluent_base|regime/Original|forget_acc|ungated|\{'|'verdict'|holds': ")


def test_the_claims_table_shows_the_regime_and_the_gap_in_words():
    rows = list(_run(acc=65.6).values())
    table = paper.claims_table(rows)
    html, text, frame = table._repr_html_(), repr(table), table.frame.to_string()
    for shown in (html, text, frame):
        assert not _LEAKS.search(shown), _LEAKS.search(shown)
    assert 'class="claim verdict-outside-regime"' in html and "\u2298 outside the paper&#x27;s regime" in html
    gap = "Original forget-class accuracy 65.6%, the paper&#x27;s regime needs at least 90% (24.4 points below)"
    assert html.count(gap) == 2 and html.count('class="claim-regime"') == 3  # two failing rows, one holding
    assert "gap 0.5" not in html  # the claim's own (ungated) result is never shown
    holding = [r for r in table.frame["Our numbers"] if "holds here" in r]
    assert holding == ["skew 0.5. Paper's regime: The base model beats a unigram model on the fine-tuning "
                       "text (holds here: base NLL 7 nats)"]
    # results written before gates existed render as before
    old = {"key": "k", "claim": "c", "source": "s", "verdict": paper.NOT_REPRODUCED, "evidence": "e"}
    assert "claim-regime" not in paper.claims_table([old])._repr_html_()


def test_findings_say_each_failed_requirement_once_with_the_claims_it_keeps_outside():
    def row(key, gap):
        return {"key": key, "claim": key, "source": "s", "verdict": paper.OUTSIDE_REGIME, "evidence": gap,
                "regime": {"name": key, "text": "t", "holds": False}}
    acc, steps = "accuracy 60%, the paper's regime needs at least 90% (30 points below)", "steps 1, needs 5"
    rows = [row("a", acc), row("b", f"{acc}; {steps}"), row("c", steps),
            {"key": "d", "claim": "d", "source": "s", "verdict": paper.REPRODUCED, "evidence": "e"}]
    assert pagekit.failed_requirements(rows) == [(acc, 2), (steps, 2)]
    md = pagekit.findings_markdown(rows, ["d"])
    assert md.count("30 points below") == 1 and "- Accuracy 60%" in md and "keeps 2 claims outside." in md
    # pooled gates open their words once with the seeds' mean; every gap keeps that head
    pooled = [row("a", f"mean over the 3 seeds: {acc}; {steps}"), row("b", f"mean over the 3 seeds: {steps}")]
    assert pagekit.failed_requirements(pooled) == [(f"mean over the 3 seeds: {acc}", 1),
                                                   (f"mean over the 3 seeds: {steps}", 2)]


def test_the_findings_and_the_closing_summary_say_how_many_claims_are_outside_with_the_gap():
    rows = list(_run(acc=65.6).values())
    md = pagekit.findings_markdown(rows, ["gap", "skew"], "One seed.")
    summary = pagekit.summary_markdown(rows, "One seed.")
    for shown in (md, summary):
        assert not _LEAKS.search(shown), _LEAKS.search(shown)
    # the headline row points below; the gate's gap is said once, under the list
    assert ("- \u2298 **Outside the paper's regime.** The gap is above 1. *Ours:* outside the regime named "
            "below.") in md
    assert md.count("24.4 points below") == 1
    assert ("**Outside the paper's regime**, because of what our run measured:\n\n- Original forget-class "
            "accuracy 65.6%, the paper's regime needs at least 90% (24.4 points below): keeps 2 claims "
            "outside.") in md
    assert summary.startswith("**What held.** Members skew right.\n\n**What did not.** A claim without a gate."
                              "\n\n**Outside the paper's regime.** "
                              "The gap is above 1; The trend is inside its noise. The paper's regime, against "
                              "ours: *The Original knows")
    assert "(24.4 points below)." in summary
    inside = pagekit.findings_markdown(list(_run(acc=95).values()), ["gap"])
    assert "**Outside the paper's regime**" not in inside and "0 outside the paper's regime" in inside


def test_the_regimes_table_gives_each_gate_in_words(tmp_path, monkeypatch):
    _yaml(tmp_path, monkeypatch, REGIMES)
    frame = pagekit.regimes_table("99_x", list(_run(acc=65.6).values()))
    assert list(frame.columns) == pagekit.REGIMES_COLUMNS and list(frame.index) == ["trained original",
                                                                                     "fluent base"]
    first = frame.loc["trained original"]
    assert first["Ours"] == "Original forget-class accuracy 65.6%" and first["Holds"] == "no"
    assert first["Claims it gates"] == "The gap is above 1; The trend is inside its noise"
    assert first["What would decide it"] == ("ResNet-18 width 64 trained 30 epochs on full CIFAR-10 (the paper "
                                             "profile); estimated 600 min on 2 CPU cores, 8 min on one GPU")
    assert frame.loc["fluent base", "Holds"] == "yes" and frame.loc["fluent base", "What would decide it"] == "\u2013"
    assert not _LEAKS.search(frame.to_string())
    with pytest.raises(ValueError, match=r"regime 'trained_original' of 99_x gates claims \['gap', 'trend'\]"):
        pagekit.regimes_table("99_x", [])


def test_a_regime_with_no_evaluated_claim_reads_not_measured(tmp_path, monkeypatch):
    _yaml(tmp_path, monkeypatch, {"trained_original": GATE})
    rows = [{"key": k, "claim": k, "verdict": paper.NOT_RUN, "evidence": ""} for k in ("gap", "trend")]
    row = pagekit.regimes_table("99_x", rows).loc["trained original"]
    assert row["Holds"] == "not measured" and row["Ours"] == "not measured on this run"


def test_the_sweep_figure_colours_every_verdict(tmp_path):
    verdicts = {v: 1 for v in paper.VERDICTS}
    summary = {"chapter": "99_x", "profile": "cpu", "axes": {"seed": [0, 1]},
               "groups": [{"runs": ["a"] * len(verdicts),
                           "claims": {"gap": {"verdicts": verdicts}, "free": {"verdicts": {paper.OUTSIDE_REGIME: 6}}}}]}
    path = sweep_summary.summary_figure(summary, tmp_path / "s.png")
    assert path.stat().st_size > 0


def test_the_css_and_the_legends_cover_every_verdict():
    css = (repo_root() / "book" / "_static" / "memlab.css").read_text()
    colours = set()
    for verdict, slug in paper.VERDICT_SLUGS.items():
        m = re.search(rf"tr\.verdict-{slug} \.verdict-badge {{ color: (#[0-9a-f]+); background: (#[0-9a-f]+); }}", css)
        assert m, f"no badge colour for {verdict}"
        colours.add(m.groups())

        def lum(h):
            h = h if len(h) == 7 else "#" + "".join(2 * d for d in h[1:])  # #555 is #555555
            c = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
            c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
            return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

        lo, hi = sorted(lum(h) for h in m.groups())
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, f"{verdict}: badge contrast below WCAG AA"
    assert len(colours) == len(paper.VERDICTS)  # distinct
    for page in ("intro.md", "rerunning.md"):
        text = (repo_root() / "book" / page).read_text()
        for verdict in paper.VERDICTS:
            assert verdict in text, f"book/{page} has no legend entry for {verdict!r}"
    assert set(book.SCORECARD_HEADS) == set(paper.VERDICTS) and set(pagekit.VERDICT_SLUGS) == set(paper.VERDICTS)


def test_a_finished_gpu_run_gets_its_own_scorecard_row_and_counts_only_the_claims_it_adds(tmp_path, monkeypatch):
    from memlab.report import gpu_section

    cpu_rows = list(_run(acc=65.6).values())   # the gate fails on the cpu run
    gpu_rows = list(_run(acc=95.0, profile="paper").values())  # and holds at paper scale
    fake = {"01_p": chapters.Chapter("01_p", "A paper chapter", "x", "p.txt")}
    monkeypatch.setattr(book, "CHAPTERS", fake)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "01_p.json").write_text(json.dumps({"profile": "cpu", "claims": cpu_rows}))
    gpu = tmp_path / "gpu"
    (gpu / "book" / "results").mkdir(parents=True)
    (gpu / "book" / "results" / "01_p.json").write_text(json.dumps(
        {"profile": "paper", "claims": gpu_rows, "provenance": {"device": "cuda (NVIDIA H200)"}}))

    def judged(rows):
        return sum(r["verdict"] in (paper.REPRODUCED, paper.NOT_REPRODUCED) for r in rows if r.get("kind", paper.CLAIM) == paper.CLAIM)

    n_cpu, n_gpu = judged(cpu_rows), judged(gpu_rows)
    assert n_gpu > n_cpu  # the constructed runs differ in what they judge
    total = sum(r.get("kind", paper.CLAIM) == paper.CLAIM for r in cpu_rows)
    for toy, row_shown in ((True, False), (False, True)):
        (gpu / gpu_section.RECORD).write_text(json.dumps({"parts": {"01_p": {"toy": toy, "status": "finished"}}}))
        book.write_scorecard(tmp_path)
        summary = (tmp_path / "_scorecard_summary.md").read_text()
        assert ("| A paper chapter, at paper scale on a GPU | `paper` |" in summary) is row_shown
        assert "| A paper chapter | `cpu` | 1 | 1 | 2 | 0 | 1 | 1 of 1 |" in summary  # the cpu row unchanged
        more = f"; {n_gpu - n_cpu} more only at paper scale, in a GPU run." if row_shown else \
            "; no run at paper scale on a GPU has judged one more yet."
        assert (f"**Judged inside the paper's regime:** {n_cpu} of the papers' {total} claims in the published "
                f"pages (reproduced, or not reproduced with the regime gate holding){more}") in summary
    holds = (tmp_path / "_what_holds.md").read_text()
    assert "**[1. A paper chapter, at paper scale](chapters/01_p.ipynb)** (one run of the paper profile on " \
           "cuda (NVIDIA H200), single-seed verdicts)." in holds
    assert "A paper chapter, at paper scale (GPU)" in (tmp_path / "scorecard.md").read_text()
