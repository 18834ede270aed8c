"""Verdict stability under other kernels: two seed sweeps of one chapter compared verdict by verdict."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.core.chapters import CHAPTERS
from memlab.core.results import chapter_code
from memlab.report import robustness, stability, sweep_summary

CHAPTER = "02_sde"
ROOT = Path(__file__).resolve().parents[1]


def _verdict(m: float, band: float) -> str:
    return "reproduced" if m > band else "not reproduced" if m < -band else "not judged"


def _sweep(folder: Path, margins: list[float], device: str, threads: int, code: str | None = "c0de",
           vote: list[str] | None = None, band: float = 0.5, gated: bool = False) -> dict:
    """A real sweep folder (one run per margin, seeds 0, 1, ...) of claim c1 (a margin, ``band``) and,
    with ``vote``, claim c2 (a verdict with no margin); summarised by :func:`memlab.report.sweep_summary.summarize`.
    ``gated``: c1's regime gate fails in every run, so its published verdict is outside the regime and
    its own verdict is kept as ``ungated`` (as :func:`memlab.report.paper.evaluate` writes it)."""
    runs = [f"seed-{s}" for s in range(len(margins))]
    for s, (run, m) in enumerate(zip(runs, margins)):
        (folder / run / "results").mkdir(parents=True)
        (folder / run / "run.json").write_text(json.dumps({"chapter": CHAPTER, "profile": "cpu",
                                                           "params": {"seed": s}}))
        claims = [{"key": "c1", "claim": "A margin claim", "source": "T1", "verdict": _verdict(m, band),
                   "evidence": "", "kind": "claim", "margin": m, "band": band, "what": "q"}]
        if gated:
            c = claims[0]
            c["ungated"] = {"verdict": c["verdict"], "evidence": ""}
            c["verdict"] = "outside the paper's regime"
            c["regime"] = {"name": "r", "text": "a regime", "why": "", "holds": False,
                           "measured": [{"label": "accuracy", "metric": "acc", "at_least": 0.9, "value": 0.5}]}
        if vote:
            claims.append({"key": "c2", "claim": "A vote claim", "source": "T2", "verdict": vote[s],
                           "evidence": "", "kind": "claim"})
        (folder / run / "results" / f"{CHAPTER}.json").write_text(json.dumps(
            {"chapter": CHAPTER, "profile": "cpu", "metrics": {"q": m}, "claims": claims,
             "provenance": {"chapter_code": code, "device": device, "cpu_threads": threads,
                            "git_commit": "abc", "wall_time_s": 10.0}}))
    (folder / "sweep.json").write_text(json.dumps(
        {"chapter": CHAPTER, "profile": "cpu", "axes": {"seed": list(range(len(margins)))}, "runs": runs}))
    return sweep_summary.write_summary(folder)


AVX512 = "cpu (Intel Xeon, AVX512)"
AVX2 = "cpu (Intel Xeon, AVX2)"


def test_summary_keeps_each_runs_verdicts_and_kernels(tmp_path):
    s = _sweep(tmp_path / "a", [1.0, 0.2, -1.0], AVX512, 2)
    assert s["run_verdicts"] == {"seed-0": {"c1": "reproduced"}, "seed-1": {"c1": "not judged"},
                                 "seed-2": {"c1": "not reproduced"}}
    assert stability.kernels(s) == {"cpu": "Intel Xeon", "isa": "AVX512", "threads": "2", "chapter_code": "c0de"}


def test_single_seed_flips_and_pooled_flips_are_counted_apart(tmp_path):
    # seed 1 crosses its band (0.55 -> 0.45: reproduced -> not judged); the pooled margin (0.58 and
    # 0.55, band 0.29) holds in both, so one single-seed flip and no pooled one
    a = _sweep(tmp_path / "a", [0.6, 0.55, 0.6], AVX512, 2, vote=["reproduced"] * 3)
    b = _sweep(tmp_path / "b", [0.6, 0.45, 0.6], AVX2, 1, vote=["reproduced", "not reproduced", "reproduced"])
    r = stability.compare_summaries(a, b)
    assert r["seeds_compared"] == [0, 1, 2] and r["per_seed_compared"] == 6
    changed = [(s["seed"], c["key"], c["a"], c["b"]) for s in r["per_seed"] for c in s["changed"]]
    assert changed == [(1, "c1", "reproduced", "not judged"), (1, "c2", "reproduced", "not reproduced")]
    assert r["per_seed_flips"] == 2 and r["per_seed_reversals"] == 1
    # the vote claim: unanimous in A, split both ways in B (seed-dependent): a pooled flip, named as a vote
    (flip,) = r["pooled_flips"]
    assert flip["key"] == "c2" and flip["a"] == "reproduced" and flip["b"] == "seed-dependent"
    assert "vote" in flip["why"] and r["pooled_compared"] == 2 and r["pooled_reversals"] == 0
    assert r["a"]["isa"] == "AVX512" and r["b"]["threads"] == "1"


def test_a_pooled_flip_says_whether_the_kernels_moved_the_measurement_past_its_band(tmp_path):
    # each seed inside its band (0.9); pooled over three the band is 0.9 / sqrt(3) = 0.52: 0.53 holds
    # and 0.50 does not, a verdict at the band's edge, the measurement the same within its bands
    a = _sweep(tmp_path / "a", [0.53, 0.53, 0.53], AVX512, 2, band=0.9)
    b = _sweep(tmp_path / "b", [0.50, 0.50, 0.50], AVX2, 2, band=0.9)
    (flip,) = stability.compare_summaries(a, b)["pooled_flips"]
    assert (flip["a"], flip["b"]) == ("reproduced", "not judged")
    assert "edge of its own band" in flip["why"] and "+0.53 \u00b1 0.52" in flip["margin_a"]
    # moved by more than both bands together: sqrt(2) * 0.52 = 0.73 < 1.53
    c = _sweep(tmp_path / "c", [-1.0, -1.0, -1.0], AVX2, 2, band=0.9)
    (flip,) = stability.compare_summaries(a, c)["pooled_flips"]
    assert "outside their combined band" in flip["why"] and stability.compare_summaries(a, c)["pooled_reversals"] == 1


def test_comparing_refuses_what_cannot_be_compared(tmp_path):
    a = _sweep(tmp_path / "a", [1.0, 1.0], AVX512, 2)
    other = {**a, "chapter": "05_capacity"}
    with pytest.raises(ValueError, match="compare two sweeps of one chapter"):
        stability.compare_summaries(a, other)
    with pytest.raises(ValueError, match="keeps no per-run verdicts"):
        stability.compare_summaries(a, {k: v for k, v in a.items() if k != "run_verdicts"})
    b = _sweep(tmp_path / "b", [1.0, 1.0, 1.0], AVX2, 2)
    b["provenance"] = {r: {**p, "params": {"seed": 10 + i}} for i, (r, p) in enumerate(b["provenance"].items())}
    with pytest.raises(ValueError, match="no seed in common"):
        stability.compare_summaries(a, b)


def test_robustness_page_shows_the_record_and_says_when_there_is_none(tmp_path):
    book = tmp_path / "book"
    (book / "results").mkdir(parents=True)
    text = robustness.write_page(book, stability_record=tmp_path / "none.json").read_text()
    assert "## Verdicts under other kernels" in text and "Not measured yet" in text
    a = _sweep(tmp_path / "a", [0.6, 0.55, 0.6], AVX512, 2)
    b = _sweep(tmp_path / "b", [0.6, 0.45, 0.6], AVX2, 1)
    entry = stability.compare_summaries(a, b)
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"measurements": {"chapters": [entry], "totals": stability.totals([entry])}}))
    text = robustness.write_page(book, stability_record=rec).read_text().split("## Verdicts under other kernels")[1]
    assert ("Single-seed verdicts: 1 of 3 changed (0 reversals). Verdicts pooled over the seeds: 0 of 1 "
            "changed (0 reversals).") in text
    assert f'<td data-label="Chapter">{CHAPTERS[CHAPTER].title}</td>' in text
    assert "AVX512 kernels, 2 thread(s)" in text and "AVX2 kernels, 1 thread(s)" in text
    assert "- seed 1: A margin claim: reproduced \u2192 not judged" in text


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path / "results")}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_verdict_stability.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def _published_book(tmp_path: Path, summary_dir: Path) -> Path:
    book = tmp_path / "book"
    robustness.publish(summary_dir, book)
    return book


def test_benchmark_records_a_finished_changed_kernel_sweep(tmp_path):
    code = chapter_code(CHAPTER)
    _sweep(tmp_path / "a", [0.6, 0.55, 0.6], AVX512, 2, code=code)
    _sweep(tmp_path / "b", [0.6, 0.45, 0.6], AVX2, 1, code=code)
    book = _published_book(tmp_path, tmp_path / "a")
    out = _bench(tmp_path, "--compare-only", str(tmp_path / "b"), "--book", str(book))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "02_sde: single-seed flips 1 of 3, pooled flips 0 of 1" in out.stdout
    rec = json.loads((tmp_path / "results" / "verdict_stability.json").read_text())
    (entry,) = rec["measurements"]["chapters"]
    assert entry["chapter"] == CHAPTER and rec["measurements"]["totals"]["per_seed_flips"] == 1
    assert rec["provenance"]["profile"] == "benchmark"
    # the same kernels on both sides: refused, and the record is not rewritten
    _sweep(tmp_path / "same", [0.6, 0.55, 0.6], AVX512, 2, code=code)
    out = _bench(tmp_path, "--compare-only", str(tmp_path / "same"), "--book", str(book))
    assert out.returncode == 2 and "ran the same kernels as the published sweep" in out.stderr


def test_benchmark_refuses_before_any_run(tmp_path):
    out = _bench(tmp_path, "07_nope")
    assert out.returncode == 2 and "chapter '07_nope' is not one of" in out.stderr
    assert not (tmp_path / "results").exists()
    # a published sweep of earlier chapter code, or the kernels it already ran: refused before sweeping
    _sweep(tmp_path / "old", [1.0, 1.0], AVX512, 2, code="0ld0")
    book = _published_book(tmp_path, tmp_path / "old")
    out = _bench(tmp_path, CHAPTER, "--book", str(book), "--out", str(tmp_path / "sw"))
    assert out.returncode == 1 and "not the current" in out.stderr and not (tmp_path / "sw").exists()
    _sweep(tmp_path / "cur", [1.0, 1.0], AVX512, 2, code=chapter_code(CHAPTER))
    book = _published_book(tmp_path / "x", tmp_path / "cur")
    out = _bench(tmp_path, CHAPTER, "--book", str(book), "--threads", "2", "--out", str(tmp_path / "sw"))
    assert out.returncode == 2 and "change neither" in out.stderr and not (tmp_path / "sw").exists()
    out = _bench(tmp_path, CHAPTER, "--book", str(book), "--threads", "0")
    assert out.returncode == 2 and "--threads 0" in out.stderr


def test_what_a_failed_regime_gate_hides_is_compared_apart(tmp_path):
    # published: outside the regime in every seed on both sides (no flip); behind the gate seed 1's own
    # verdict moved (reproduced -> not judged), the pooled own verdict (reproduced) did not
    a = _sweep(tmp_path / "a", [0.6, 0.55, 0.6], AVX512, 2, gated=True)
    b = _sweep(tmp_path / "b", [0.6, 0.45, 0.6], AVX2, 1, gated=True)
    assert a["run_ungated"]["seed-1"] == {"c1": "reproduced"} and b["run_ungated"]["seed-1"] == {"c1": "not judged"}
    r = stability.compare_summaries(a, b)
    assert r["per_seed_flips"] == 0 and r["pooled_flips"] == []
    hidden = r["behind_gates"]
    assert hidden["per_seed_compared"] == 3 and hidden["pooled_compared"] == 1 and hidden["pooled_flips"] == []
    assert [(x["seed"], x["a"], x["b"]) for x in hidden["per_seed_flips"]] == [(1, "reproduced", "not judged")]
    rec = {"measurements": {"chapters": [r], "totals": stability.totals([r])}}
    text = "\n".join(robustness.stability_section(rec))
    assert "behind its regime gates" in text and "single-seed flips 1 of 3, pooled flips 0 of 1" in text
