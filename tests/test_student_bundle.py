"""The student bundle of `memlab exercises build`: it installs without network into a fresh
environment, its notebooks run from it, and nothing of exercises/ (masters, solutions, hidden tests,
rehearsal submissions) is inside it or inside its wheel.

The fresh environment is a new venv whose only view of the dependencies is a folder of links to
this environment's packages, memlab's own left out (installing torch again would be gigabytes), so
`pip install --no-index` of the wheel resolves every pinned dependency as on a clean machine that
already has them, and `import memlab` can only come from the wheel.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from memlab.course import bundle, exercises

REPO = Path(__file__).resolve().parents[1]
CHAPTER = "02_sde"  # the notebook run from the installed bundle (a few seconds)


def _env(**extra) -> dict[str, str]:
    """The environment of the fresh venv's commands: no pip configuration (no index, no find-links),
    no network for memlab, no path leaking this checkout's library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               MEMLAB_OFFLINE="1", OMP_NUM_THREADS="1", MEMLAB_PROGRESS="0", **extra)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def _deps_view(dest: Path) -> Path:
    """Links to every package of this environment except memlab itself (and no .pth files)."""
    dest.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("memlab", "__editable__")) or name.endswith((".pth", ".egg-link")):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def _fresh_venv(where: Path) -> tuple[Path, Path]:
    """A new venv (no pip of its own: the dependency view holds one) seeing the dependency view."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    py = where / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env=_env()).stdout.strip()
    (Path(purelib) / "memlab_test_deps.pth").write_text(str(_deps_view(where.parent / "deps")) + "\n")
    return py, Path(purelib)


def _forbidden() -> tuple[set[str], list[str]]:
    """SHA-256 of every file of exercises/, and text only a master holds (hidden tests, sample answers)."""
    hashes = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (REPO / "exercises").rglob("*") if p.is_file()}
    texts = []
    for path in exercises.masters(REPO).values():
        nb = exercises.read_master(path)
        for q in exercises.questions(nb):
            texts += [l.strip() for l in q["sample"].splitlines() if len(l.strip()) > 30]
        secret, _ = exercises._secret_and_public(nb)
        texts += [l.strip() for l in secret if l.strip().startswith(("assert", "_")) and len(l.strip()) > 30]
    return hashes, texts


def _bundle_files(course: Path) -> dict[str, bytes]:
    """Every file of the unpacked bundle, and every member of its wheel, by path."""
    files = {p.relative_to(course).as_posix(): p.read_bytes() for p in course.rglob("*") if p.is_file()}
    for whl in course.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            files.update({f"{whl.name}!{n}": z.read(n) for n in z.namelist()})
    return files


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The bundle as a student receives it: built for one chapter, zipped, unpacked elsewhere."""
    tmp = tmp_path_factory.mktemp("bundle")
    t0 = time.perf_counter()
    built = exercises.build([CHAPTER], out=tmp / "build", root=REPO)
    made = bundle.write_bundle(built, tmp / "build", REPO)
    print(f"bundle: built in {time.perf_counter() - t0:.1f} s")
    with zipfile.ZipFile(made["zip"]) as z:
        z.extractall(tmp / "student")
    return tmp / "student" / bundle.BUNDLE


def test_the_bundle_holds_no_master_file_solution_or_hidden_test(course):
    files = _bundle_files(course)
    assert f"assignments/{CHAPTER}.ipynb" in files and f"notebooks/{CHAPTER}.py" in files
    wheel = [n for n in files if n.endswith(".whl")]
    assert len(wheel) == 1, wheel
    members = [n.split("!", 1)[1] for n in files if "!" in n]
    assert all(m.startswith(("memlab/", "memlab-")) for m in members), "the wheel holds the library alone"
    assert not [m for m in members if "exercises/" in m or "demo-submissions" in m]
    hashes, texts = _forbidden()
    assert len(hashes) >= 8 and len(texts) >= 30, "the forbidden files and texts were not found"
    same = [n for n, data in files.items() if hashlib.sha256(data).hexdigest() in hashes]
    assert not same, f"files of exercises/ in the bundle: {same}"
    for name, data in files.items():
        text = data.decode("utf-8", "replace")
        leaked = [t for t in texts if t in text]
        assert not leaked, f"{name} holds master-only text: {leaked[:2]}"


def test_the_wheel_pins_what_pyproject_pins(course):
    whl = next(course.glob("*.whl"))
    with zipfile.ZipFile(whl) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = {l.split(":", 1)[1].strip().replace(" ", "") for l in meta.splitlines()
                if l.startswith("Requires-Dist:") and "extra ==" not in l}
    pinned = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert requires == {p.replace(" ", "") for p in pinned}
    assert "torch==2.14.1" in requires and "torchvision==0.29.1" in requires


def test_the_bundle_installs_offline_and_its_notebook_runs_from_the_wheel(course, tmp_path):
    readme = (course / "README.md").read_text()
    wheel = next(course.glob("*.whl")).name
    command = "python3 -m venv .venv && .venv/bin/python -m pip install memlab-*.whl"
    assert bundle.INSTALL == command and command in readme, "the README's one install command"
    assert command in (REPO / "book" / "exercises.md").read_text(), "the student page gives the same command"
    t0 = time.perf_counter()
    py, site = _fresh_venv(tmp_path / "venv")
    # The README's command, with --no-index: the network is not needed.
    pip = subprocess.run([str(py), "-m", "pip", "install", "--no-index", wheel], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    installed = sorted(p.relative_to(site).as_posix() for p in (site / "memlab").rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts)
    assert installed == sorted(rel for _, rel in bundle.library_files()), "the installed package is the library"
    print(f"bundle: fresh venv and offline install in {time.perf_counter() - t0:.1f} s")

    # memlab finds the course folder from a notebook's folder; the wheel's memlab, not this checkout's.
    probe = subprocess.run([str(py), "-c", "import memlab; from memlab.core.config import repo_root; "
                            "print(memlab.__file__); print(repo_root())"], cwd=course / "assignments",
                           env=_env(), capture_output=True, text=True, timeout=120)
    where, root = probe.stdout.split()
    assert Path(where).is_relative_to(site) and Path(root) == course, probe.stdout + probe.stderr
    assert probe.stderr == "", "inside the course folder there is no fallback notice"

    t0 = time.perf_counter()
    env = _env(JUPYTER_PATH=str(_kernel_for(py, tmp_path)), MEMLAB_RUNS=str(tmp_path / "runs"),
               USER="ada-test", LOGNAME="ada-test")
    run = subprocess.run([str(py), "-c", RUN_NOTEBOOK, str(course / "assignments" / f"{CHAPTER}.ipynb")],
                         cwd=course / "assignments", env=env,
                         capture_output=True, text=True, timeout=300)
    print(f"bundle: {CHAPTER} student notebook ran from the installed bundle in {time.perf_counter() - t0:.1f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["errors"] == [], report["errors"]
    assert Path(report["memlab"]).is_relative_to(site), "the kernel imported another memlab"
    assert report["checks"] >= 3, "the notebook's grader.check cells ran"
    # The open exercise's commands write into this student's own folder (their login name here).
    assert f"--book-dir {tmp_path / 'runs' / 'ada-test' / 'ex02'}" in report["printed"], report["printed"][-800:]


def _kernel_for(py: Path, tmp: Path) -> Path:
    """A JUPYTER_PATH whose python3 kernel is the fresh venv's interpreter (no other kernel found)."""
    spec = tmp / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}", "--IPKernelApp.log_level=ERROR"],
        "display_name": "Python 3", "language": "python"}))
    return tmp / "jupyter"


# Runs a student notebook top to bottom in a kernel of the fresh venv, then asks the kernel which
# memlab it imported; prints one JSON line: the cells that raised, memlab's path, checks run.
RUN_NOTEBOOK = r"""
import json, sys
import nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import memlab; print('MEMLAB=' + memlab.__file__)"))
nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
errors = [o["ename"] + ": " + o["evalue"] for c in nb.cells if c.cell_type == "code"
          for o in c.get("outputs", []) if o["output_type"] == "error"]
text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
checks = sum(bool(c.outputs) for c in nb.cells if c.cell_type == "code" and "grader.check(" in c.source)
printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
print(json.dumps({"errors": errors, "memlab": text.split("MEMLAB=")[-1].strip(), "checks": checks,
                  "printed": printed}))
"""
