"""The chapter runner end to end on a tiny fake chapter: validation, publishing, failure handling."""
import json
from pathlib import Path

import pytest

from memlab import cli
from memlab.core import chapters
from memlab.report import book
from conftest import install_fake_chapter

FAKE_SPEC = '''
from memlab.core.config import Param
SPEC = {"seed": Param(int, 0, low=0), "n": Param(int, {"smoke": 2, "cpu": 3, "paper": 9}, low=1, high=5),
        "fail": Param(bool, False)}
'''

FAKE_NOTEBOOK = '''
# %% [markdown]
# # Fake chapter

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides of SPEC's parameters

# %%
import sys
sys.path.insert(0, {spec_dir!r})
import fake_spec
from memlab.core import config, results
from memlab.report import plotting
cfg = config.resolve_spec("fake", fake_spec.SPEC, profile, **params)
run = results.Run(cfg)

# %%
if cfg.fail:
    raise RuntimeError("planned failure")
fig, ax = plotting.figure()
ax.plot(range(cfg.n))
plotting.publish(fig, "line", "fake")
run.record(total=sum(range(cfg.n)))
run.save(claims=[])
'''


@pytest.fixture
def fake_project(tmp_path, monkeypatch):
    install_fake_chapter(tmp_path, monkeypatch, FAKE_SPEC, FAKE_NOTEBOOK)
    return tmp_path


def _book_files(root: Path) -> list[str]:
    book = root / "book"
    return sorted(str(p.relative_to(book)) for p in book.rglob("*") if p.is_file()) if book.exists() else []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "nope"], "chapter 'nope': must be one of"),
        (["run", "fake", "-p", "colour", "red"], "parameter 'colour': not a parameter of chapter 'fake'"),
        (["run", "fake", "-p", "n", "six"], "parameter 'n': must be an integer"),
        (["run", "fake", "-p", "n", "7"], "parameter 'n': must be an integer in [1, 5]"),
        (["run", "fake", "--profile", "gpu"], "parameter 'profile': must be one of smoke, cpu, paper"),
        (["run", "fake", "-p", "n", "2", "-p", "n", "3"], "parameter 'n': given more than once"),
    ],
)
def test_bad_input_stops_before_work(fake_project, capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert _book_files(fake_project) == []


def test_missing_data_path_is_an_error(fake_project, capsys, monkeypatch):
    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(fake_project / "no-such-data"))
    assert cli.main(["run", "fake"]) == 2
    assert "parameter 'data_root'" in capsys.readouterr().err
    assert _book_files(fake_project) == []


def test_run_publishes_then_failure_keeps_previous_results(fake_project, capsys):
    assert cli.main(["run", "fake", "--profile", "smoke", "-p", "n", "4"]) == 0
    files = _book_files(fake_project)
    assert files == ["chapters/fake.ipynb", "costs.json", "figures/fake/line.png", "figures/fake/line.svg",
                     "results/fake.json"]  # costs.json: the book's cost log (memlab.core.costs)
    res = json.loads((fake_project / "book" / "results" / "fake.json").read_text())
    assert res["metrics"] == {"total": 6} and res["params"]["n"] == 4 and res["profile"] == "smoke"
    nb = json.loads((fake_project / "book" / "chapters" / "fake.ipynb").read_text())
    assert any("injected-parameters" in c["metadata"].get("tags", []) for c in nb["cells"])
    before = (fake_project / "book" / "results" / "fake.json").read_bytes()

    assert cli.main(["run", "fake", "--profile", "smoke", "-p", "fail", "true"]) == 1
    err = capsys.readouterr().err
    assert "chapter 'fake' failed in cell" in err and "planned failure" in err
    assert (fake_project / "book" / "results" / "fake.json").read_bytes() == before
    assert _book_files(fake_project) == files  # nothing half-written, no staging left
    assert (fake_project / "_build" / "failed" / "fake.ipynb").exists()


def test_a_failed_run_with_book_dir_keeps_everything_beside_that_folder(fake_project, tmp_path, capsys):
    """--book-dir governs where a failure's notebook goes too: never into the repository's own folders."""
    other = tmp_path / "elsewhere" / "book"
    assert cli.main(["run", "fake", "--profile", "smoke", "-p", "fail", "true", "--book-dir", str(other)]) == 1
    failed = other.parent / "_build" / "failed" / "fake.ipynb"
    assert f"failed notebook: {failed}" in capsys.readouterr().err and failed.exists()
    assert not (fake_project / "_build").exists() and _book_files(fake_project) == []


def test_parse_value():
    assert cli.parse_value("3") == 3 and cli.parse_value("0.5") == 0.5 and cli.parse_value("[a, b]") == ["a", "b"]
    assert cli.parse_value("none") is None and cli.parse_value("true") is True and cli.parse_value("GA+FT") == "GA+FT"


def test_scorecard_and_toc_filter(tmp_path):
    book_dir = tmp_path / "book"
    (book_dir / "results").mkdir(parents=True)
    cid = next(iter(chapters.CHAPTERS))
    (book_dir / "results" / f"{cid}.json").write_text(json.dumps({
        "profile": "cpu",
        "claims": [{"claim": "a | b", "source": "T1", "verdict": "reproduced", "evidence": "x=1"},
                   {"claim": "c", "source": "T2", "verdict": "not run at this profile", "evidence": ""},
                   {"claim": "d", "source": "T3", "verdict": "not judged", "evidence": "inside noise"},
                   {"claim": "e", "source": "Thm 1", "verdict": "reproduced", "evidence": "", "kind": "sanity check"},
                   {"claim": "f", "source": "Thm 2", "verdict": "not reproduced", "evidence": "", "kind": "sanity check"}],
    }))
    staged = tmp_path / "stage"
    text = book.write_scorecard(book_dir, dest=staged).read_text()
    assert not (book_dir / "scorecard.md").exists()  # render writes into its staging copy only
    text = book.write_scorecard(book_dir).read_text()
    # paper claims by verdict (reproduced, not reproduced, outside the regime, not judged, not run;
    # no seed-dependent column while no chapter has one), sanity checks apart
    assert "| `cpu` | 1 | 0 | 0 | 1 | 1 | 1 of 2 |" in text and "a | b" in text and "not run yet" in text
    assert 'class="memlab-claims"' in text and "\u2713 reproduced" in text
    assert "| `cpu` | 1 | 0 | 0 | 1 | 1 | 1 of 2 |" in (book_dir / "_scorecard_summary.md").read_text()
    (book_dir / "chapters").mkdir()
    (book_dir / "chapters" / "a.ipynb").write_text("{}")
    toc = {"root": "book/intro", "parts": [{"caption": "C", "chapters": [{"file": "book/chapters/a"}, {"file": "book/chapters/b"}]},
                                           {"caption": "Empty", "chapters": [{"file": "book/chapters/c"}]}]}
    kept, skipped = book._filtered_toc(toc, tmp_path)
    assert kept["parts"] == [{"caption": "C", "chapters": [{"file": "book/chapters/a"}]}]
    assert skipped == ["book/chapters/b", "book/chapters/c"]


def test_dedupe_inline_scripts(tmp_path):
    page = tmp_path / "p.html"
    page.write_text('<head>\n<script>const A = 1;</script>\n<script src="x.js"></script>\n'
                    '<script>const A = 1;</script>\n<script>const B = 2;</script>\n</head>')
    assert book.dedupe_inline_scripts(page)
    assert page.read_text().count("const A = 1") == 1 and "const B = 2" in page.read_text()
    assert not book.dedupe_inline_scripts(page)


def test_scorecard_tallies_book_hypotheses_apart_from_paper_claims(tmp_path, monkeypatch):
    fake = {"01_p": chapters.Chapter("01_p", "A paper chapter", "x", "p.txt"),
            "06_h": chapters.Chapter("06_h", "A hypotheses chapter", "y", "", hypotheses=True)}
    monkeypatch.setattr(book, "CHAPTERS", fake)
    (tmp_path / "results").mkdir()
    for cid, verdict in (("01_p", "reproduced"), ("06_h", "not reproduced")):
        (tmp_path / "results" / f"{cid}.json").write_text(json.dumps({
            "profile": "cpu", "claims": [{"key": "k", "claim": "c", "source": "s", "verdict": verdict,
                                          "evidence": ""}]}))
    book.write_scorecard(tmp_path)
    summary = (tmp_path / "_scorecard_summary.md").read_text()
    papers, hyp = summary.split("**Book hypotheses**")
    assert "| A paper chapter | `cpu` | 1 | 0 | 0 | 0 | 0 | – |" in papers and "hypotheses chapter" not in papers
    assert "| A hypotheses chapter | `cpu` | 0 | 1 | 0 | 0 | 0 | – |" in hyp
