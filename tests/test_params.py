"""Every parameter `memlab list` prints is accepted by `memlab run -p`, bad values are refused before work.

The loop over all parameters runs in-process through ``cli.main`` with ``--dry-run`` (validation only);
the data scan of the preflight is switched off there (it is the same for every parameter and is
tested in test_failsafe.py). One real subprocess call runs the whole path, preflight included.
"""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import require_data
from memlab import cli
from memlab.core import config
from memlab.report import paper
from memlab.core.chapters import CHAPTERS
from memlab.core.config import ConfigError, Param

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def _run(argv):
    """cli.main(argv) -> (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def _book_state():
    """The paths under book/ (a refused run creates none: no staging folder, no output)."""
    return sorted(str(p.relative_to(BOOK)) for p in BOOK.rglob("*"))


@pytest.fixture
def no_data_scan(monkeypatch):
    monkeypatch.setattr(cli, "_preflight", lambda *a, **k: None, raising=False)


def _text(value) -> str:
    """A value as a user types it on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


# str parameters whose smoke default is '' (empty is refused on the command line): a valid non-empty value
NON_EMPTY = {"base_model": "/tmp/memlab-base", "instruct_model": "/tmp/memlab-instruct", "convergence_model": "1x8"}


def _valid_text(chapter: str, name: str) -> tuple[str, object]:
    spec = config.chapter_module(chapter).SPEC
    pname, p = config.find_param(spec, name)
    if pname != name:  # GROUP.KEY: the smoke value of the group, else the module default
        group, key = name.split(".", 1)
        value = spec[pname].default_for("smoke").get(group, {}).get(key, p.default)
    else:
        value = p.default_for("smoke")
    if value == "":
        value = NON_EMPTY[name]
    return _text(value), value


CASES = [(c, n) for c in CHAPTERS for n in config.parameter_names(config.chapter_module(c).SPEC)]


def test_list_prints_every_parameter_with_kind_range_and_default():
    rc, out, _ = _run(["list"])
    assert rc == 0
    for chapter in CHAPTERS:
        block = out.split(f"{chapter}:", 1)[1].split("\n0", 1)[0]
        printed = [ln.split()[0] for ln in block.splitlines()[1:] if ln.startswith("    ") and "default" in ln]
        assert printed == config.parameter_names(config.chapter_module(chapter).SPEC)
    assert "SSD.alpha                  float, >= 0; default smoke 10.0 | cpu 25.0 | paper 10.0" in out
    assert "rho" in out and "float, in (0, 1); default 0.35" in out


@pytest.mark.parametrize("chapter, name", CASES, ids=[f"{c}:{n}" for c, n in CASES])
def test_every_listed_parameter_passes_validation(no_data_scan, chapter, name):
    text, value = _valid_text(chapter, name)
    rc, out, err = _run(["run", chapter, "--profile", "smoke", "-p", name, text, "--dry-run"])
    assert rc == 0, err
    cfg = json.loads(out)
    if "." in name:
        group, key = name.split(".", 1)
        assert cfg["method_hparams"].get(group, {}).get(key, value) == value
    else:
        assert cfg[name] == value


def test_dry_run_equals_resolve_for_every_chapter_and_profile(no_data_scan):
    for chapter in CHAPTERS:
        for profile in ("smoke", "cpu"):
            rc, out, err = _run(["run", chapter, "--profile", profile, "--dry-run"])
            assert rc == 0, err
            assert json.loads(out) == json.loads(json.dumps(config.resolve(chapter, profile).to_dict()))


def test_values_are_typed_as_written(no_data_scan):
    rc, out, _ = _run(["run", "01_bn_illusion", "--profile", "smoke", "-p", "lr", "1e-3", "-p", "budgets",
                       "[10, 20]", "-p", "SalUn.lr", "0.01", "-p", "vit_control", "false", "--dry-run"])
    cfg = json.loads(out)
    assert rc == 0 and cfg["lr"] == 0.001 and cfg["budgets"] == [10, 20] and cfg["vit_control"] is False
    assert cfg["method_hparams"]["SalUn"] == {"steps": 3, "lr": 0.01, "batch_size": 16}
    rc, out, _ = _run(["run", "05_capacity", "--profile", "smoke", "-p", "memory_gib", ".inf", "--dry-run"])
    assert rc == 0 and math.isinf(json.loads(out)["memory_gib"])


def test_method_hparams_keep_the_cache_key_dicts():
    from memlab.experiments import ch01_bn_illusion as E

    for profile in ("smoke", "cpu", "paper"):
        cfg = config.resolve("01_bn_illusion", profile)
        for m in E.METHODS:
            if m != "Retrain":
                assert E.method_hparams(cfg, m, 3) == {**E.METHOD_HPARAMS[profile][m], "seed": 3}
    # a key the profile does not set, given the module's own default, leaves the dict as it was
    cfg = config.resolve("01_bn_illusion", "cpu", **{"SalUn.mask_ratio": 0.5, "SSD.lam": 1.0})
    cpu = E.METHOD_HPARAMS["cpu"]
    assert "mask_ratio" not in cpu["SalUn"] and "lam" not in cpu["SSD"]
    assert E.method_hparams(cfg, "SalUn", 0) == {**cpu["SalUn"], "seed": 0}
    assert E.method_hparams(cfg, "SSD", 0) == {**cpu["SSD"], "seed": 0}
    cfg = config.resolve("01_bn_illusion", "cpu", **{"SalUn.lr": 0.01234, "SalUn.mask_ratio": 0.3})
    assert E.method_hparams(cfg, "SalUn", 0) == {**cpu["SalUn"], "lr": 0.01234, "mask_ratio": 0.3, "seed": 0}


BAD = [
    ("01_bn_illusion", ["-p", "profile", "smoke"], "parameter 'profile': choose it with --profile"),
    ("02_sde", ["--profile", "paper", "-p", "profile", "smoke"], "parameter 'profile'"),
    ("02_sde", ["-p", "seed", "99999999999999999999"], "parameter 'seed': must be an integer in [0, 2147483647]"),
    ("01_bn_illusion", ["-p", "width", "100000"], "parameter 'width': a fast CNN of width 100000"),
    ("02_sde", ["-p", "width", "100000"], "GiB"),
    ("05_capacity", ["-p", "dataset_sizes", "[1000000000]"], "parameter 'dataset_sizes': N = 1000000000"),
    ("01_bn_illusion", ["-p", "train_per_class", "100000"], "parameter 'train_per_class': must be an integer in"),
    ("01_bn_illusion", ["-p", "dataset", "cifar100", "-p", "train_per_class", "600"],
     "parameter 'train_per_class': cifar100 holds 500"),
    ("04_qskew", ["-p", "n_members", "100000"], "parameter 'n_members'"),
    ("05_capacity", ["-p", "text_dataset_sizes", "[1000000]"], "parameter 'text_dataset_sizes'"),
    ("01_bn_illusion", ["-p", "lr", ""], "parameter 'lr': empty value"),
    ("01_bn_illusion", ["-p", "epochs", "012"], "parameter 'epochs': must be an integer"),
    ("01_bn_illusion", ["-p", "epochs", "3 #x"], "parameter 'epochs': must be an integer"),
    ("01_bn_illusion", ["-p", "epochs", "0x1f"], "parameter 'epochs'"),
    ("01_bn_illusion", ["-p", "budgets", "[10, x]"], "parameter 'budgets': must be a list of integers >= 1"),
    ("01_bn_illusion", ["-p", "budgets", "10"], "parameter 'budgets': must be a list of integers >= 1, written"),
    ("01_bn_illusion", ["-p", "lr", "-.inf"], "parameter 'lr': must be a number in [1e-08, 10]"),
    ("05_capacity", ["-p", "memory_gib", "-.inf"], "parameter 'memory_gib'"),
    ("04_qskew", ["-p", "rho", "1"], "parameter 'rho': must be a number in (0, 1)"),
    ("04_qskew", ["-p", "h", "0"], "parameter 'h': must be a number > 0"),
    ("04_qskew", ["-p", "fixed_ratios", "[0.5, 2]"], "parameter 'fixed_ratios'"),
    ("01_bn_illusion", ["-p", "SalUn.lr", "0"], "parameter 'SalUn.lr': must be a number > 0"),
    ("01_bn_illusion", ["-p", "SalUn.lrr", "0.1"], "parameter 'SalUn.lrr': not a parameter of chapter"),
    ("01_bn_illusion", ["-p", "Salun.lr", "0.1"], "did you mean SalUn.lr"),
    ("01_bn_illusion", ["-p", "method_hparams", "{}"], "parameter 'method_hparams': set one key at a time"),
    ("01_bn_illusion", ["-p", "vit_control", "yes"], "parameter 'vit_control': must be true or false"),
    ("03_canary_audit", ["-p", "seeds", "[0, 4294967296]"], "parameter 'seeds'"),
    ("02_sde", ["-p", "lr", "0.1", "-p", "lr", "0.2"], "parameter 'lr': given more than once"),
]


@pytest.mark.parametrize("chapter, extra, fragment", BAD, ids=[" ".join(b[1]) for b in BAD])
def test_bad_values_refused_before_work(chapter, extra, fragment):
    if "n_members" in extra or "text_dataset_sizes" in extra:
        require_data("wikitext-2")  # the bound comes from the size of the text files
    before = _book_state()
    start = time.perf_counter()
    argv = ["run", chapter, *(extra if "--profile" in extra else ["--profile", "smoke", *extra])]
    rc, out, err = _run(argv)  # default book dir: the published book/ must stay as it is
    assert rc == 2 and out == ""
    assert fragment in err and len(err.strip().splitlines()) == 1, err
    assert time.perf_counter() - start < 5
    assert _book_state() == before


def test_argparse_accepts_values_starting_with_a_dash(no_data_scan):
    rc, _, err = _run(["run", "05_capacity", "--profile", "smoke", "-p", "seed", "-1", "--dry-run"])
    assert rc == 2 and "parameter 'seed': must be an integer in [0," in err  # read as -1, refused by range


@pytest.mark.parametrize("kind, text, expected", [
    (int, "3", 3), (int, "-4", -4), (int, "0", 0), (float, "1e-3", 0.001), (float, "2", 2.0), (float, ".5", 0.5),
    (float, "-.inf", -math.inf), (float, ".inf", math.inf), (float, "1E+2", 100.0), (bool, "True", True),
    (str, "GA+FT", "GA+FT"), (str, "'a b'", "a b"), (str, "3 #x", "3 #x"),
])
def test_parse_text_reads_yaml_1_2_scalars(kind, text, expected):
    assert config.parse_text("x", text, Param(kind, None)) == expected


@pytest.mark.parametrize("kind, text", [
    (int, "012"), (int, "1.5"), (int, "1e3"), (int, "3 #x"), (int, "0x10"), (int, ""), (float, "1e"),
    (float, "0012.5"), (float, "inf"), (bool, "yes"), (bool, "1"), (str, ""), (str, "  "),
])
def test_parse_text_refuses_yaml_1_1_quirks(kind, text):
    with pytest.raises(ConfigError, match="parameter 'x'"):
        config.parse_text("x", text, Param(kind, None))


def test_parse_lists_and_none():
    p = Param(list, None, item=str)
    assert config.parse_text("m", "[GA, 'a,b', \"c\"]", p) == ["GA", "a,b", "c"]
    assert config.parse_text("n", "none", Param(int, None, allow_none=True)) is None
    with pytest.raises(ConfigError, match="parameter 'n': must be an integer"):
        config.parse_text("n", "none", Param(int, None))
    with pytest.raises(ConfigError, match="unclosed quote"):
        config.parse_text("m", "['a, b]", p)


@pytest.mark.parametrize("closed, inside, outside", [
    ("both", [0.0, 0.5, 1.0], [-0.1, 1.1]), ("left", [0.0, 0.99], [1.0]), ("right", [1.0, 0.01], [0.0]),
    ("neither", [0.5], [0.0, 1.0]),
])
def test_open_and_half_open_ranges(closed, inside, outside):
    p = Param(float, 0.5, low=0.0, high=1.0, closed=closed)
    for v in inside:
        assert config.check_value("r", v, p) == v
    for v in outside:
        with pytest.raises(ConfigError, match=r"parameter 'r': must be a number in [\[(]0, 1[\])]"):
            config.check_value("r", v, p)
    with pytest.raises(ValueError, match="closed must be one of"):
        Param(float, 0.5, low=0.0, closed="open")


def test_inf_only_where_the_param_allows_it():
    with pytest.raises(ConfigError):
        config.check_value("a", math.inf, Param(float, 1.0, low=0.0))
    assert config.check_value("a", math.inf, Param(float, 1.0, low=0.0, finite=False)) == math.inf
    with pytest.raises(ConfigError):
        config.check_value("a", math.nan, Param(float, 1.0, finite=False))


def test_real_subprocess_dry_run_and_refusal():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    exe = [sys.executable, "-m", "memlab.cli"]
    ok = subprocess.run([*exe, "run", "02_sde", "--profile", "smoke", "-p", "unlearn_lr", "1e-3", "--dry-run"],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    if "MEMLAB_DATA_ROOT" not in env and ok.returncode == 2:
        pytest.skip("no data root: the preflight refuses before the dry run")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["unlearn_lr"] == 0.001
    bad = subprocess.run([*exe, "run", "05_capacity", "--profile", "smoke", "-p", "memory_gib", "-.inf"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "parameter 'memory_gib'" in bad.stderr


# ----------------------------------------------------------------------------- claims and metric keys

def _claim(check, **kw):
    return paper.Claim("k", "text", "T1", check, **kw)


def test_declared_missing_metric_is_not_run_but_a_typo_raises():
    claims = paper.declare(["table1", "table2"], [_claim(lambda m: (m["table2"]["x"] > 0, "e"))])
    (v,) = paper.evaluate(claims, {"table1": {}}, "cpu")
    assert v["verdict"] == paper.NOT_RUN and "table2" in v["evidence"]
    (v,) = paper.evaluate(claims, {"table1": {}, "table2": {"y": 1}}, "cpu")  # a row the run lacks
    assert v["verdict"] == paper.NOT_RUN and "table2/x" in v["evidence"]
    typo = paper.declare(["table1"], [_claim(lambda m: (m["tabel1"] > 0, "e"))])
    with pytest.raises(paper.UndeclaredMetric, match="'tabel1'"):
        paper.evaluate(typo, {"table1": 1}, "cpu")
    with pytest.raises(paper.UndeclaredMetric):
        paper.evaluate(paper.declare(["a"], [_claim(lambda m: ("b" in m, "e"))]), {"a": 1}, "cpu")


def test_other_exceptions_in_a_claim_raise():
    inner_key = paper.declare(["a"], [_claim(lambda m: ({}["oops"], "e"))])
    with pytest.raises(KeyError, match="oops"):
        paper.evaluate(inner_key, {"a": 1}, "cpu")
    zero = paper.declare(["a"], [_claim(lambda m: (m["a"] / 0 > 1, "e"))])
    with pytest.raises(ZeroDivisionError):
        paper.evaluate(zero, {"a": 1}, "cpu")


def _recorded_keys(notebook: Path) -> set[str]:
    """Metric keys a notebook records: run.record(name=...) and run.metrics["name"] = ..."""
    import ast

    keys = set()
    for node in ast.walk(ast.parse(notebook.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "record":
            for kw in node.keywords:
                if kw.arg:
                    keys.add(kw.arg)
                elif isinstance(kw.value, ast.Dict):  # run.record(**{f"table4_{side}": ...})
                    keys |= {"table4_base", "table4_instruct"}
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and getattr(t.value, "attr", "") == "metrics" and \
                        isinstance(t.slice, ast.Constant):
                    keys.add(t.slice.value)
    return keys


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_every_chapter_declares_its_metric_keys(chapter):
    mod = config.chapter_module(chapter)
    declared = set(mod.METRIC_KEYS)
    assert len(declared) == len(mod.METRIC_KEYS)
    assert all(c.metrics == declared for c in mod.claims())
    assert _recorded_keys(ROOT / CHAPTERS[chapter].source) <= declared
    published = ROOT / "book" / "results" / f"{chapter}.json"
    if published.exists():
        res = json.loads(published.read_text())
        assert set(res["metrics"]) <= declared
        # the strict evaluator reads the published metrics without an undeclared key or a crash ...
        # (gated by the chapter's regimes, as memlab.report.pagekit.judge publishes them)
        again = {v["key"]: v["verdict"] for v in paper.evaluate(mod.claims(), res["metrics"], res["profile"],
                                                                regimes=paper.regimes(chapter))}
        assert set(again) == {v["key"] for v in res["claims"]}
        # ... and, while the page is from the chapter's current code, gives its verdicts (a page of
        # earlier code was judged by earlier predicates; it is republished, never edited by hand)
        from memlab.core.results import chapter_code

        if res.get("provenance", {}).get("chapter_code") == chapter_code(chapter):
            assert again == {v["key"]: v["verdict"] for v in res["claims"]}
