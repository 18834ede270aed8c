"""``scripts/gpu-evidence.sh``: the prepared paper-scale GPU run, exercised at toy size on the CPU.

The script runs :data:`memlab.report.gpu_section.PARTS` (one ``memlab run`` each, paper profile on a GPU,
smoke sizes with ``--toy``) under hard time limits and records each part; ``memlab render`` shows
the results as an "At paper scale (GPU)" section of each chapter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.core import config
from memlab.report import gpu_section as S
from memlab.run import gpu_evidence as G
from memlab.core.config import repo_root

ROOT = repo_root()


def test_every_part_is_a_valid_paper_run_and_the_header_names_it():
    header = (ROOT / "scripts" / "gpu-evidence.sh").read_text()
    for part in S.PARTS:
        cfg = config.resolve(part.chapter, "paper", **part.params)  # a typo or bad size fails here
        assert all(cfg[k] == v for k, v in part.params.items())
        config.resolve(part.chapter, "smoke", **part.toy)
        assert part.chapter in header and f"~{part.minutes:g} min" in header
        assert part.limit_s >= 60 * part.minutes  # a limit stops a broken run, never a sound one


def test_commands_are_the_chapters_run_at_paper_or_smoke():
    part, out = S.PARTS[0], Path("/x")
    paper_cmd = G.command(part, out, toy=False)
    assert paper_cmd[1:5] == ["run", part.chapter, "--profile", "paper"] and "--cache-dir" not in paper_cmd
    for k, v in part.params.items():
        i = paper_cmd.index(k)
        assert paper_cmd[i - 1] == "-p" and json.loads(paper_cmd[i + 1]) == v
    toy_cmd = G.command(part, out, toy=True)
    assert toy_cmd[3:5] == ["--profile", "smoke"] and toy_cmd[toy_cmd.index("--cache-dir") + 1] == "/x/cache"


def test_an_unknown_part_is_refused_before_any_work(tmp_path, capsys):
    assert G.main(["--toy", "--out", str(tmp_path / "out"), "--only", "07_nope"]) == 2
    err = capsys.readouterr().err
    assert "07_nope" in err and "05_capacity" in err
    assert not (tmp_path / "out").exists()


def test_a_part_past_its_limit_is_stopped_and_publishes_nothing(tmp_path):
    entry = G.run_part(G.parts(["02_sde"])[0], tmp_path, toy=True, limit_s=3)
    assert entry["status"] == "stopped at its 3 s limit" and entry["wall_s"] < 60
    assert not (tmp_path / "book" / "results" / "02_sde.json").exists()


def test_no_result_yet_says_what_the_run_decides_and_costs(tmp_path):
    for part in S.PARTS:
        text = S.section_markdown(part.chapter, tmp_path)
        assert text.startswith("## At paper scale (GPU)") and part.decides in text
        assert "bash scripts/gpu-evidence.sh" in text and f"about {part.minutes:g} minutes" in text
    assert S.section_markdown("06_cross_lens", tmp_path) is None


@pytest.mark.slow
def test_the_script_runs_every_part_at_toy_size(tmp_path):
    out = tmp_path / "gpu"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-evidence.sh"), "--toy", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for i, part in enumerate(S.PARTS, 1):  # a line before and after every part, in order
        assert f"gpu-evidence [{i}/{len(S.PARTS)}] {part.chapter}: about" in proc.stdout
        assert f"gpu-evidence [{i}/{len(S.PARTS)}] {part.chapter}: finished in" in proc.stdout
    record = json.loads((out / S.RECORD).read_text())
    assert {p.chapter for p in S.PARTS} == set(record["parts"])
    for part in S.PARTS:
        res = json.loads((out / "book" / "results" / f"{part.chapter}.json").read_text())
        assert res["profile"] == "smoke" and record["parts"][part.chapter]["toy"] is True
        # a toy result is never shown as paper-scale evidence
        assert "No run of it has finished on a GPU yet" in S.section_markdown(part.chapter, out)
    # the same files, as a GPU run writes them, give the section with settings and verdicts in words
    record["parts"]["05_capacity"]["toy"] = False
    (out / S.RECORD).write_text(json.dumps(record))
    text = S.section_markdown("05_capacity", out)
    res = json.loads((out / "book" / "results" / "05_capacity.json").read_text())
    # the sizes that ran (here the smoke ones) beside the cpu book's
    assert "| vocab size | 32 | 8 |" in text and "| model sizes | 1x8, 1x12, 1x16, 2x16 | 1x4, 1x8 |" in text
    for v in res["claims"]:
        assert v["claim"].replace("*", "\\*")[:40] in text or v["claim"][:40] in text
        assert f"`{v['key']}`" not in text
    assert "{" not in text and "None" not in text


def test_parallel_parts_run_at_once_each_under_its_own_limit(tmp_path, monkeypatch, capsys):
    # stand-in commands: one part finishes, one fails, one outlives its limit; all start together
    scripts = {"05_capacity": "print('capacity done')", "01_bn_illusion": "import sys; sys.exit(3)",
               "02_sde": "import time; print('sde started', flush=True); time.sleep(60)"}
    monkeypatch.setattr(G, "command", lambda part, out, toy, threads=None, extra=None:
                        [sys.executable, "-c", scripts[part.chapter]])
    record = G.run(tmp_path, toy=True, limit_s=4, parallel=True)
    parts = record["parts"]
    assert parts["05_capacity"]["status"] == "finished"
    assert parts["01_bn_illusion"]["status"] == "failed (exit 3)"
    assert parts["02_sde"]["status"] == "stopped at its 4 s limit" and parts["02_sde"]["wall_s"] < 40
    assert json.loads((tmp_path / S.RECORD).read_text())["parts"] == parts
    assert (tmp_path / "logs" / "05_capacity.log").read_text() == "capacity done\n"
    assert G._last_line(tmp_path / "logs" / "02_sde.log") == "sde started"
    out = capsys.readouterr().out
    for i, part in enumerate(S.PARTS, 1):
        assert f"gpu-evidence [{i}/3] {part.chapter}: about" in out
    assert out.index("02_sde: about") < out.index("05_capacity: finished")  # started before any ended


def test_parts_in_turn_show_their_output_and_record_where_a_stopped_one_had_got_to(tmp_path, monkeypatch, capsys):
    scripts = {"05_capacity": "print('capacity done')", "01_bn_illusion": "import sys; sys.exit(3)",
               "02_sde": "import time; print('02_sde: Original: 10% 585/5850 [00:10<01:30, 58.5it/s]', flush=True); time.sleep(60)"}
    monkeypatch.setattr(G, "command", lambda part, out, toy, threads=None, extra=None:
                        [sys.executable, "-c", scripts[part.chapter]])
    record = G.run(tmp_path, toy=True, limit_s=4)
    parts = record["parts"]
    assert [parts[c]["status"] for c in ("05_capacity", "01_bn_illusion")] == ["finished", "failed (exit 3)"]
    assert parts["02_sde"]["status"] == "stopped at its 4 s limit" and parts["02_sde"]["wall_s"] < 40
    assert parts["02_sde"]["reached"] == "02_sde: Original: 10% 585/5850 [00:10<01:30, 58.5it/s]" and "parallel" not in parts["02_sde"]
    assert (tmp_path / "logs" / "05_capacity.log").read_text() == "capacity done\n"
    out = capsys.readouterr().out  # the terminal sees each part's own output too
    assert "capacity done" in out and "02_sde: Original" in out
    assert out.index("05_capacity: finished") < out.index("02_sde: about")  # one after another
    record["parts"]["02_sde"]["toy"] = False  # as a GPU run writes it
    (tmp_path / S.RECORD).write_text(json.dumps(record))
    text = S.section_markdown("02_sde", tmp_path)
    assert "The last attempt stopped at its 4 s limit after" in text and "sharing the GPU" not in text
    assert "it had reached Original, step 585 of 5850." in text


def test_last_line_reads_through_progress_bar_rewrites(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"stage 1\ntrain:  10%|#    | 1/10\rtrain:  50%|#####| 5/10\r\n\n")
    assert G._last_line(log) == "train:  50%|#####| 5/10"
    assert G._last_line(tmp_path / "missing.log") == ""


def test_set_changes_one_setting_of_one_part_and_reads_it_by_its_kind():
    extra = G.overrides(["02_sde.epochs=12", "02_sde.subset_sizes=[40, 80, 160]", "01_bn_illusion.gn_control=true"])
    assert extra == {"02_sde": {"epochs": 12, "subset_sizes": [40, 80, 160]}, "01_bn_illusion": {"gn_control": True}}
    part = G.parts(["02_sde"])[0]
    cmd = G.command(part, Path("/x"), toy=False, extra=extra["02_sde"])
    assert cmd[cmd.index("epochs") + 1] == "12" and cmd.count("epochs") == 1
    assert json.loads(cmd[cmd.index("n_targets") + 1]) == part.params["n_targets"]  # the rest kept


@pytest.mark.parametrize("item, said", [
    ("02_sde.epochs", "CHAPTER.NAME=VALUE"),                 # no value
    ("epochs=12", "CHAPTER.NAME=VALUE"),                     # no chapter
    ("06_cross_lens.seed=1", "06_cross_lens"),               # not a part
    ("02_sde.epoch=12", "epoch"),                            # unknown parameter
    ("02_sde.epochs=zero", "epochs"),                        # wrong kind
    ("02_sde.subset_sizes=[100, 250]", "subset_sizes"),      # refused by the chapter's own checks
])
def test_a_bad_set_is_refused_before_any_work(tmp_path, capsys, item, said):
    assert G.main(["--out", str(tmp_path / "out"), "--set", item]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-evidence: error: ") and said in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_set_with_toy_is_refused_rather_than_ignored(tmp_path, capsys):
    assert G.main(["--toy", "--out", str(tmp_path / "out"), "--set", "02_sde.epochs=12"]) == 2
    assert "--set changes the paper-scale sizes" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_finished_run_shows_the_sizes_that_ran_and_an_unfinished_one_where_it_stopped(tmp_path):
    part = G.parts(["02_sde"])[0]
    ran = dict(config.resolve("02_sde", "paper", **{**part.params, "epochs": 12}))
    (tmp_path / "book" / "results").mkdir(parents=True)
    (tmp_path / "book" / "results" / "02_sde.json").write_text(json.dumps(
        {"params": ran, "claims": [], "provenance": {"device": "cuda (NVIDIA H200)", "wall_time_s": 420}}))
    text = S.section_markdown("02_sde", tmp_path)
    assert "| epochs | 6 | 12 |" in text and "| n targets | 50 | 50 |" in text and "7.0 minutes" in text
    entry = {"status": "stopped at its 530 s limit", "wall_s": 530.2, "toy": False, "parallel": True,
             "reached": "01_bn_illusion: Retrain: 52% 3048/5850 [01:40<01:28, 31.68it/s]"}
    (tmp_path / S.RECORD).write_text(json.dumps({"parts": {"01_bn_illusion": {**entry, "chapter": "01_bn_illusion"}}}))
    text = S.section_markdown("01_bn_illusion", tmp_path)
    assert "No run of it has finished on a GPU yet" in text
    assert "stopped at its 530 s limit after 530 s while sharing the GPU with the other parts" in text
    assert "it had reached Retrain, step 3048 of 5850." in text
    assert S._stage_words("01_bn_illusion", "01_bn_illusion: SalUn: done, 400 in 00:09") == "SalUn (done)"
    assert S._stage_words("x", "estimate: 3 of 5 models cached") == "estimate: 3 of 5 models cached"


def test_the_offline_scripts_refuse_what_they_cannot_use_before_any_work(tmp_path):
    # each script works from the repository holding it: copies in an empty tree find nothing
    (tmp_path / "scripts").mkdir()
    for name in ("gpu-offline-pack.sh", "gpu-offline-run.sh"):
        (tmp_path / "scripts" / name).write_text((ROOT / "scripts" / name).read_text())
    run = subprocess.run(["bash", "scripts/gpu-offline-run.sh", "--only", "02_sde"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no .gpu-pack/ here" in run.stderr and "gpu-offline-pack.sh" in run.stderr
    env = {k: v for k, v in os.environ.items() if k != "MEMLAB_DATA_ROOT"}
    pack = subprocess.run(["bash", "scripts/gpu-offline-pack.sh"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert pack.returncode != 0 and "MEMLAB_DATA_ROOT" in pack.stderr
    (tmp_path / "data" / "cifar10-jpeg").mkdir(parents=True)  # WikiText-2 missing
    pack = subprocess.run(["bash", "scripts/gpu-offline-pack.sh"], cwd=tmp_path,
                          env={**env, "MEMLAB_DATA_ROOT": str(tmp_path / "data")},
                          capture_output=True, text=True, timeout=60)
    assert pack.returncode == 2 and "wikitext-2 is missing" in pack.stderr
    assert not (tmp_path / ".gpu-pack").exists() and not (tmp_path / ".gpu-pack.tmp").exists()
