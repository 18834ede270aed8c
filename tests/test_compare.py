"""``memlab compare``: verdicts, metrics against their bands, provenance, on constructed runs and sweeps."""
import copy
import json
import math
import os
from pathlib import Path

import pytest
from scipy import stats

from memlab import cli
from memlab.core import results
from memlab.report import compare

CH = "02_sde"
FLIP_TEXT = "SDE beats MMD and Wasserstein distance on the same task"
STAY_TEXT = "F1 grows with the subset size"
T2 = float(stats.t.ppf(0.975, 2))  # 3 seeds: 2 degrees of freedom


def run_results(seed=0, threads=1, device="cpu (Intel Xeon, AVX2)", f1x=0.30, f1y=0.70, flip="reproduced",
                margins=None):
    """A results file's dict as ``memlab run`` writes it (the fields compare reads)."""
    claims = [{"key": "flip_key", "claim": FLIP_TEXT, "source": "Table 2", "verdict": flip, "evidence": "",
               "kind": "claim"},
              {"key": "stay_key", "claim": STAY_TEXT, "source": "Table 1", "verdict": "not judged", "evidence": "",
               "kind": "claim"}]
    for row, (m, b) in zip(claims, margins or []):
        if m is not None:
            row.update(margin=m, band=b)
    return {"chapter": CH, "title": "t", "profile": "cpu",
            "params": {"chapter": CH, "profile": "cpu", "seed": seed, "n_targets": 20},
            "metrics": {"acc": 0.5, "f1": {"x": f1x, "y": f1y}, "cost": {"this_run_wall_s": 100.0 + seed},
                        "vision_wall_s": 3.0},
            "claims": claims, "figures": [],
            "provenance": {"git_commit": "abc", "profile": "cpu", "device": device, "cpu_threads": threads,
                           "torch": "2.0", "wall_time_s": 100.0 + threads, "date": f"2026-01-0{seed + 1}",
                           "chapter_code": "fff", "cost": {"cpu_s": 90.0, "wall_s": 100.0, "threads": threads,
                                                           "peak_memory_mb": 10.0, "keys": {"k": {}}}}}


def spread_summary(std=0.01, profile="cpu"):
    """A published seed sweep's summary whose f1 metrics have between-seed std ``std`` over 3 seeds."""
    iv = {"n": 3, "mean": 0.5, "std": std, "ci95": [0.4, 0.6]}
    return {"chapter": CH, "profile": profile, "axes": {"seed": [0, 1, 2]}, "runs_done": [], "runs_failed": [],
            "groups": [{"params": {}, "runs": ["seed-0", "seed-1", "seed-2"],
                        "metrics": {"f1.x": iv, "f1.y": iv}, "claims": {}}],
            "provenance": {}, "timing": []}


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project root with a published book (page and seed sweep of chapter 2); the commands act on it."""
    for module in (compare, results):
        monkeypatch.setattr(module, "repo_root", lambda: tmp_path)
    monkeypatch.delenv("MEMLAB_OUTPUT_DIR", raising=False)
    write(tmp_path / "book" / "results" / f"{CH}.json", run_results())
    write(tmp_path / "book" / "robustness" / f"{CH}.json", spread_summary())
    return tmp_path


def main(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# ----------------------------------------------------------------------------- pure functions

def test_identical_inputs_have_no_differences():
    a = compare.side_from_results(run_results(), "A")
    report = compare.compare_sides(a, copy.deepcopy(a))
    assert report["verdicts_changed"] == [] and report["provenance"] == [] and report["parameters"] == []
    m = report["metrics"]
    assert m["outside_band"] == m["inside_band"] == m["no_band"] == [] and m["identical"] == 3
    assert not report["differs"] and compare.exit_code([report]) == 0
    assert "matches" in compare.verdict_line([report]) and "exit 0" in compare.verdict_line([report])


def test_costs_are_not_metrics():
    for path in ("cost.this_run_s", "paperlike.wall_s", "reference.wall s", "vision_wall_s", "x.models_cached"):
        assert compare.is_cost(path), path
    for path in ("membership_f1", "n_targets", "sde_sizes.nonmembers", "f1.SDE.R=5%"):
        assert not compare.is_cost(path), path
    side = compare.side_from_results(run_results(), "A")
    assert set(side["metrics"]) == {"acc", "f1.x", "f1.y"}
    assert side["cost"]["wall time (s)"] == 101.0 and side["cost"]["CPU time (s)"] == 90.0


def test_band_closed_forms():
    run = {"mean": 0.0, "std": None, "n": 1}
    band, rule = compare.metric_band(run, run, {"std": 0.01, "n": 3}, "the book's sweep")
    assert band == pytest.approx(T2 * 0.01 * math.sqrt(2)) and "the book's sweep (3 runs)" in rule
    sweep = {"mean": 0.0, "std": 0.02, "n": 3}
    band, rule = compare.metric_band(sweep, run)
    assert band == pytest.approx(T2 * 0.02 * math.sqrt(1 / 3 + 1)) and "spread of A" in rule
    other = {"mean": 0.0, "std": 0.04, "n": 5}  # pooled over both sweeps, 2 + 4 dof
    pooled = math.sqrt((2 * 0.02 ** 2 + 4 * 0.04 ** 2) / 6)
    band, rule = compare.metric_band(sweep, other)
    assert band == pytest.approx(float(stats.t.ppf(0.975, 6)) * pooled * math.sqrt(1 / 3 + 1 / 5))
    assert "both sweeps" in rule
    assert compare.metric_band(run, run) is None  # no spread anywhere: no band invented


def constructed_pair():
    """A and B differ in one verdict, f1.x just outside its band, f1.y just inside, CPU and threads."""
    band = T2 * 0.01 * math.sqrt(2)  # 0.0609
    a = run_results()
    b = run_results(threads=4, device="cpu (AMD EPYC, AVX512)", f1x=0.30 + band * 1.05, f1y=0.70 - band * 0.95,
                    flip="not judged")
    return a, b, band


def test_constructed_pair_reports_exactly_its_differences():
    a, b, band = constructed_pair()
    spread = compare.spread_from_summary(spread_summary(), {}, "book")
    report = compare.compare_sides(compare.side_from_results(a, "A"), compare.side_from_results(b, "B"),
                                   spread, "published seed sweep")
    assert report["verdicts_changed"] == [{"key": "flip_key", "claim": FLIP_TEXT, "a": "reproduced",
                                           "b": "not judged", "across_a": "", "across_b": ""}]
    m = report["metrics"]
    assert [r["metric"] for r in m["outside_band"]] == ["f1.x"]
    assert [r["metric"] for r in m["inside_band"]] == ["f1.y"]
    assert m["outside_band"][0]["band"] == pytest.approx(band) and m["no_band"] == [] and m["identical"] == 1
    assert {r["field"]: (r["a"], r["b"]) for r in report["provenance"]} == {
        "cpu": ("Intel Xeon", "AMD EPYC"), "isa": ("AVX2", "AVX512"), "cpu_threads": (1, 4)}
    assert report["parameters"] == [] and report["differs"] and compare.exit_code([report]) == 1


def test_no_band_is_counted_apart_and_strict_counts_it():
    a, b, _ = constructed_pair()
    b["claims"][0]["verdict"] = "reproduced"
    report = compare.compare_sides(compare.side_from_results(a, "A"), compare.side_from_results(b, "B"))
    rows = report["metrics"]["no_band"]
    assert [r["metric"] for r in rows] == ["f1.x", "f1.y"]  # the larger relative difference first
    x = next(r for r in rows if r["metric"] == "f1.x")
    assert x["relative"] == pytest.approx((b["metrics"]["f1"]["x"] - 0.30) / b["metrics"]["f1"]["x"])
    assert not report["differs"] and compare.exit_code([report]) == 0 and compare.exit_code([report], True) == 1
    text = "\n".join(compare.lines(report))
    assert "no band known: 2" in text and "% of the larger" in text


def test_margins_are_compared_against_the_rows_bands():
    # flip_key: margins 0.5 vs 0.2 (difference 0.3 > hypot(0.1, 0.1) = 0.141); stay_key: 0.1 vs 0.0 (inside)
    a = run_results(margins=[(0.5, 0.1), (0.1, 0.1)])
    b = run_results(margins=[(0.2, 0.1), (0.0, 0.1)])
    report = compare.compare_sides(compare.side_from_results(a, "A"), compare.side_from_results(b, "B"))
    g = report["margins"]
    assert [r["key"] for r in g["outside_band"]] == ["flip_key"]
    assert [r["key"] for r in g["inside_band"]] == ["stay_key"]
    assert g["outside_band"][0]["band"] == pytest.approx(math.hypot(0.1, 0.1))
    assert report["differs"]  # a margin moved outside its band, though no verdict changed
    # rows without margins (the fields are not written yet): nothing compared, no error
    plain = compare.compare_sides(compare.side_from_results(run_results(), "A"),
                                  compare.side_from_results(run_results(margins=[(0.5, 0.1)]), "B"))
    assert plain["margins"] == {"outside_band": [], "inside_band": []}


def test_terminal_lines_name_claims_by_text_and_never_by_key():
    a, b, _ = constructed_pair()
    spread = compare.spread_from_summary(spread_summary(), {}, "book")
    text = "\n".join(compare.lines(compare.compare_sides(compare.side_from_results(a, "A"),
                                                         compare.side_from_results(b, "B"), spread, "sweep")))
    assert f"{FLIP_TEXT}: A reproduced, B not judged" in text
    assert "flip_key" not in text and "stay_key" not in text and "{" not in text and "'" not in text
    assert "f1 / x: A 0.3" in text and "from the between-seed spread of sweep (3 runs)" in text
    assert "threads: A 1, B 4" in text and "vector ISA (ATen capability): A AVX2, B AVX512" in text
    assert "CPU: A Intel Xeon, B AMD EPYC" in text and "Metrics inside their band: 1" in text


# ----------------------------------------------------------------------------- the command

def test_cli_identical_files_exit_0(project, tmp_path, capsys):
    a = write(tmp_path / "a" / "results" / f"{CH}.json", run_results())
    code, out, _ = main(["compare", str(a), str(tmp_path / "a")], capsys)  # a file and its run folder
    assert code == 0 and "Verdicts changed: 0 of 2 claims" in out and "Provenance differences: none" in out


def test_cli_constructed_pair_json_and_terminal(project, tmp_path, capsys):
    a, b, band = constructed_pair()
    pa, pb = write(tmp_path / "a" / "book" / "results" / f"{CH}.json", a), write(tmp_path / "b.json", b)
    code, out, _ = main(["compare", str(tmp_path / "a" / "book"), str(pb), "--json", "-"], capsys)
    assert code == 1
    payload = json.loads(out)
    assert payload["exit_code"] == 1 and len(payload["reports"]) == 1
    r = payload["reports"][0]
    assert [v["claim"] for v in r["verdicts_changed"]] == [FLIP_TEXT]
    assert [x["metric"] for x in r["metrics"]["outside_band"]] == ["f1.x"]
    assert [x["metric"] for x in r["metrics"]["inside_band"]] == ["f1.y"]
    assert "published seed sweep" in r["metrics"]["outside_band"][0]["rule"]
    assert {d["field"] for d in r["provenance"]} == {"cpu", "isa", "cpu_threads"}
    report_file = tmp_path / "out" / "report.json"
    report_file.parent.mkdir()
    code, out, _ = main(["compare", str(pa), str(pb), "--json", str(report_file)], capsys)
    saved = json.loads(report_file.read_text())["reports"][0]
    assert code == 1 and all(saved[k] == r[k] for k in ("verdicts_changed", "metrics", "provenance", "margins"))
    assert "Verdicts changed: 1 of 2 claims" in out and "Metrics outside their band: 1 of 3 compared" in out
    assert "Result: differs: 1 verdict changed, 1 outside their band" in out and "(exit 1)" in out


def make_sweep(folder: Path, values, verdicts) -> Path:
    """A sweep folder of seeds 0..n-1 whose runs have f1.x = values[i], the flip claim's verdicts[i]
    (no margin) and the other claim's margin 0.04 + 0.01 i (band 0.1: not judged, as its verdict says)."""
    rids = [f"seed-{i}" for i in range(len(values))]
    write(folder / "sweep.json", {"chapter": CH, "profile": "cpu", "axes": {"seed": list(range(len(values)))},
                                  "runs": rids})
    for i, (x, v) in enumerate(zip(values, verdicts)):
        write(folder / rids[i] / "run.json", {"chapter": CH, "profile": "cpu", "params": {"seed": i}})
        write(folder / rids[i] / "results" / f"{CH}.json",
              run_results(seed=i, f1x=x, flip=v, margins=[(None, None), (0.04 + 0.01 * i, 0.1)]))
    return folder


def test_sweep_against_a_run(project, tmp_path, capsys):
    values = [0.29, 0.30, 0.31]  # std 0.01
    sweep = make_sweep(tmp_path / "sw", values, ["reproduced", "reproduced", "not judged"])
    band = T2 * 0.01 * math.sqrt(1 / 3 + 1)
    run = write(tmp_path / "run.json", run_results(f1x=0.30 + 1.1 * band, margins=[(None, None), (-0.045, 0.05)]))
    code, out, _ = main(["compare", str(sweep), str(run), "--json", "-"], capsys)
    r = json.loads(out)["reports"][0]
    assert code == 1 and r["a"]["kind"] == "sweep" and r["a"]["n"] == 3
    row = r["metrics"]["outside_band"][0]
    assert row["metric"] == "f1.x" and row["band"] == pytest.approx(band) and "spread of A" in row["rule"]
    assert row["a"] == pytest.approx(0.30)
    (flip,) = r["verdicts_changed"]  # the sweep's pooled verdict (memlab.report.pooling), its runs' votes beside it
    assert (flip["a"], flip["across_a"], flip["b"]) == ("not judged", "reproduced in 2 of 2 runs (1 not judged)",
                                                        "reproduced")
    # the other claim's pooled margin (mean 0.05, band max(t s / sqrt 3, sqrt(3 * 0.1^2) / 3) = 0.0577: still
    # not judged) against -0.045 +- 0.05: both not judged, yet 0.095 apart, outside hypot(0.0577, 0.05)
    (m,) = r["margins"]["outside_band"]
    pooled_band = max(T2 * 0.01 / math.sqrt(3), math.sqrt(3 * 0.01) / 3)
    assert m["a"] == pytest.approx(0.05) and m["band"] == pytest.approx(math.hypot(pooled_band, 0.05))
    assert {d["field"]: (d["a"], d["b"]) for d in r["parameters"]} == {"seed": ([0, 1, 2], 0)}
    # the same run inside the band, and a sweep whose seeds agree: nothing differs
    make_sweep(tmp_path / "sw2", values, ["reproduced"] * 3)
    write(tmp_path / "run2.json", run_results(f1x=0.30 + 0.9 * band))
    code, out, _ = main(["compare", str(tmp_path / "sw2"), str(tmp_path / "run2.json")], capsys)
    assert code == 0 and "Metrics inside their band: 1 (band from the between-seed spread of A" in out
    assert "Metrics identical: 2" in out and "wall time (s): A 101, B 101" in out
    # two sweeps: the same metrics (identical means), one claim's mix against agreeing seeds
    code, out, _ = main(["compare", str(sweep), str(tmp_path / "sw2"), "--json", "-"], capsys)
    r = json.loads(out)["reports"][0]
    assert code == 1 and r["metrics"]["identical"] == 3 and r["parameters"] == []
    assert [(v["a"], v["b"]) for v in r["verdicts_changed"]] == [("not judged", "reproduced")]
    assert r["margins"]["inside_band"][0]["difference"] == pytest.approx(0)
    # a summary written before pooled rows existed: the runs' shared verdict, else their mix
    assert compare._group_verdict({"verdicts": {"reproduced": 3}}) == "reproduced"
    assert compare._group_verdict({"verdicts": {"reproduced": 2, "not judged": 1}}) == (
        "mixed over 3 runs: 2 reproduced, 1 not judged")


def test_a_run_is_compared_with_the_sweep_setting_it_ran():
    iv = {"n": 3, "mean": 0.5, "std": 0.01}
    summary = {"chapter": CH, "profile": "cpu", "axes": {}, "provenance": {}, "groups": [
        {"params": {}, "runs": ["a"], "metrics": {"acc": iv}, "claims": {}},
        {"params": {"n_targets": 20}, "runs": ["b"], "metrics": {"acc": {**iv, "mean": 0.9}}, "claims": {}},
        {"params": {"n_targets": 40}, "runs": ["c"], "metrics": {"acc": iv}, "claims": {}}]}
    side = compare.side_from_summary(summary, "S", params=run_results()["params"])  # n_targets 20
    assert side["metrics"]["acc"]["mean"] == 0.9 and side["params"]["n_targets"] == 20
    with pytest.raises(ValueError, match=r"S: the sweep has 2 settings \(n_targets 20; n_targets 40\) and none match"):
        compare.side_from_summary({**summary, "groups": summary["groups"][1:]}, "S", params={"n_targets": 10})


def test_one_argument_compares_the_newest_run_with_the_page(project, capsys, monkeypatch):
    old = write(project / "data" / "sweeps" / "s" / "seed-0" / "results" / f"{CH}.json", run_results(threads=3))
    new = write(project / "_build" / "scratch" / "results" / f"{CH}.json", run_results(threads=2))
    os.utime(old, (1_000_000, 1_000_000))
    code, out, _ = main(["compare", CH, "--json", "-"], capsys)
    r = json.loads(out)["reports"][0]
    assert code == 0 and r["a"]["label"] == str(new) and "published page" in r["b"]["label"]
    assert r["provenance"] == [{"field": "cpu_threads", "a": 2, "b": 1}]
    out_dir = write(project / "mine" / "results" / f"{CH}.json", run_results(flip="not reproduced")).parent.parent
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(out_dir))  # a run's output folder, newest of all
    code, out, _ = main(["compare", CH], capsys)
    assert code == 1 and f"A: {out_dir / 'results' / (CH + '.json')}" in out
    assert f"{FLIP_TEXT}: A not reproduced, B reproduced" in out


@pytest.mark.parametrize("argv, message", [
    (["compare", "{tmp}/nowhere.json", "{tmp}/b.json"], "A: '{tmp}/nowhere.json' does not exist; give a results file"),
    (["compare", "{tmp}/b.json", "{tmp}/other.json"], "holds chapter 02_sde and B ({tmp}/other.json) holds chapter "
                                                      "05_capacity: compare two runs of one chapter"),
    (["compare", "{tmp}/b.json", "{tmp}/empty"], "B: '{tmp}/empty' holds no chapter results"),
    (["compare", "{tmp}/b.json", "{tmp}/bad.json"], "B: {tmp}/bad.json is not JSON"),
    (["compare", "nope"], "'nope' is not a chapter, nor a results file or folder; a chapter is one of 01_bn_illusion"),
    (["compare", "2"], "'2' is not a chapter"),  # an id, as memlab run takes it
    (["compare", "{tmp}/b.json"], "is a path: give a second results file or folder"),
    (["compare", "04_qskew"], "no run of chapter 04_qskew outside the published book"),
])
def test_bad_input_is_one_clear_error_and_writes_nothing(project, tmp_path, capsys, argv, message):
    write(tmp_path / "b.json", run_results())
    other = run_results()
    other["chapter"] = "05_capacity"
    write(tmp_path / "other.json", other)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    write(project / "book" / "results" / "04_qskew.json", {**run_results(), "chapter": "04_qskew"})
    report = tmp_path / "report.json"
    code, out, err = main([a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--json", str(report)], capsys)
    assert code == 2 and out == "" and not report.exists()
    assert err.count("memlab: error:") == 1 and message.replace("{tmp}", str(tmp_path)) in err


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0 when no verdict changed and no metric differs outside its band; 1 when something does" in text
    assert "2 for bad input" in text


def test_a_summary_alone_says_what_it_does_not_record(project, tmp_path, capsys):
    run = write(tmp_path / "run.json", run_results())
    code, out, _ = main(["compare", str(run), str(project / "book" / "robustness" / f"{CH}.json")], capsys)
    assert code == 1  # the summary holds no claims: both are absent from B
    assert f"{FLIP_TEXT}: A reproduced, B absent" in out
    (line,) = [x for x in out.splitlines() if "not recorded in B, so not compared:" in x]
    assert all(f" {w}," in line for w in ("CPU", "threads", "vector ISA (ATen capability)", "code commit"))
    assert "threads: A" not in out  # a field one side lacks is not a difference of values


def test_one_argument_after_memlab_run_replaced_the_committed_page(project, capsys):
    import subprocess

    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "book"], check=True)
    subprocess.run(git + ["commit", "-qm", "page"], check=True)
    code, _, err = main(["compare", CH], capsys)
    assert code == 2 and "no run of chapter 02_sde outside the published book" in err  # page == commit
    write(project / "book" / "results" / f"{CH}.json", run_results(threads=2, flip="not judged"))
    code, out, _ = main(["compare", CH], capsys)  # memlab run without --book-dir: the page is the run
    assert code == 1 and f"A: {project / 'book' / 'results' / (CH + '.json')}" in out
    assert f"{FLIP_TEXT}: A not judged, B reproduced" in out and "threads: A 2, B 1" in out


def test_a_json_path_in_no_folder_is_refused_before_anything_is_written(project, tmp_path, capsys):
    a = write(tmp_path / "a.json", run_results())
    code, out, err = main(["compare", str(a), str(a), "--json", str(tmp_path / "no" / "r.json")], capsys)
    assert code == 2 and out == "" and "parameter 'json'" in err and not (tmp_path / "no").exists()


def test_kernel_settings_recorded_as_a_group_are_compared():
    a, b = run_results(), run_results()
    a["provenance"]["kernels"] = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    b["provenance"]["kernels"] = {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    report = compare.compare_sides(compare.side_from_results(a, "A"), compare.side_from_results(b, "B"))
    assert report["provenance"] == [{"field": "kernels ATEN_CPU_CAPABILITY", "a": "avx2", "b": "avx512"}]
    assert "kernels ATEN_CPU_CAPABILITY: A avx2, B avx512" in "\n".join(compare.lines(report))
