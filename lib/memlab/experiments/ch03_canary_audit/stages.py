"""Chapter 3's stages: data, cached models and probes, from a resolved config to plain results.

Pipeline (one code path for every profile):

1. :func:`prepare` — fictional authors, a tokenizer and a base model that
   follows the ``<think> ... </think> answer`` chat format. At ``smoke``/``cpu``
   a small Qwen2 is pre-trained here (cached); at ``paper`` a DeepSeek-R1
   distillate is loaded offline with ``from_pretrained``.
2. :func:`memorise` — a LoRA adapter (peft) that memorises every author under
   one trace template (BIO, META or NONE); cached by its settings.
3. :func:`unlearn_sweep` — NPO with the forgetting loss masked to the answer
   span (or Gradient Ascent), evaluated with :func:`evaluate_arms` at every K.
4. :func:`evaluate_arms` — the probes of :mod:`memlab.science.canaries` at fixed weights;
   :func:`summarise` turns their per-probe results into means and intervals;
   :func:`run_sweep` chains 2-4.

Only the LoRA weights train after pre-training, so NPO's reference
log-probabilities come from the memorised adapter, computed once before
unlearning; no second copy of the model is held. Returns are dicts, lists and
tensors; tables and figures are built elsewhere (``tables.py``, the notebook).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from memlab.core import cache
from memlab.core.config import device, seed_everything
from memlab.data import authors as A
from memlab.models import lm
from memlab.science import canaries
from memlab.science.unlearning import npo

from .spec import CHAPTER, CODE_VERSION, SMALL, SUPPRESS

#: key of the cached adapter's training seconds (a 0-d tensor beside the LoRA weights; not a weight)
TRAIN_SECONDS = "_memlab.train_seconds"

# ----------------------------------------------------------------------------- data

GENERIC_TRACE = "This is a general knowledge question. I will answer it directly."
COMPLETE_TRACE = "The user gives the start of a sentence. I will complete it."


@dataclass
class Setup:
    """Everything the stages share: base model, chat format, authors and probe ids."""

    model: torch.nn.Module
    fmt: canaries.ChatFormat
    authors: list[A.Author]
    generic: list[A.GenericProbe]
    sentences: list[str]
    heads: list[list[int]]  # canary head ids per author
    conts: list[list[int]]  # canary continuation ids per author
    head_texts: list[str]
    pad_id: int
    device: torch.device
    name: str = SMALL
    #: training seconds of every LoRA adapter this run used, {"<template> s<seed>": s}, cached or not
    train_seconds: dict = field(default_factory=dict)
    #: the labels of ``train_seconds`` whose adapter came from the cache (its time is not in this run's wall)
    cached: set = field(default_factory=set)
    #: vocabulary ids of chat tags added to a pretrained tokenizer (their embedding rows train with the adapter)
    new_tokens: tuple[int, ...] = ()

    @property
    def end_id(self) -> int:
        return self.fmt.end_id

    @property
    def close_id(self) -> int:
        return self.fmt.close_id


def author_examples(fmt: canaries.ChatFormat, setup_heads: Sequence[str], authors: Sequence[A.Author],
                    template: str, span: str) -> tuple[list[tuple[list[int], list[bool]]], list[int]]:
    """Training turns of every author (canary probe + QA probes) and their author index."""
    examples, owners = [], []
    for i, (a, head) in enumerate(zip(authors, setup_heads)):
        t = A.trace(a, template)
        examples.append(fmt.example(A.canary_question(head), t, a.canary, span=span))
        owners.append(i)
        for q, ans, _ in A.qa_pairs(a):
            examples.append(fmt.example(q, t, ans, span=span))
            owners.append(i)
    return examples, owners


def retain_examples(fmt: canaries.ChatFormat, sentences: Sequence[str], head_len: int,
                    span: str) -> list[tuple[list[int], list[bool]]]:
    """"Complete the sentence" turns on WikiText sentences: same format as the canary probes, no authors."""
    out = []
    for s in sentences:
        ids = fmt.codec.encode(s)
        if len(ids) <= head_len:
            continue
        out.append(fmt.example(A.canary_question(fmt.codec.decode(ids[:head_len])), COMPLETE_TRACE, s, span=span))
    return out


def generic_examples(fmt: canaries.ChatFormat, generic: Sequence[A.GenericProbe]):
    return [fmt.example(g.question, GENERIC_TRACE, g.answer, span="response") for g in generic]


# ----------------------------------------------------------------------------- stage 1: base model

def _tokenizer_texts(authors, generic, sentences):
    texts = [a.biography for a in authors] + [A.trace(authors[0], t) for t in A.TEMPLATES]
    texts += [f"{g.question} {g.answer}" for g in generic] + list(sentences)
    texts += [GENERIC_TRACE, COMPLETE_TRACE, A.canary_question("x")] + [q for a in authors for q, _, _ in A.qa_pairs(a)]
    return texts


def prepare(cfg) -> Setup:
    """Authors, tokenizer and base model (pre-trained and cached, or loaded offline)."""
    from memlab.data.text import load_wikitext2, train_bpe, wikitext_sentences
    from memlab.models import qwen_small as Q

    seed_everything(cfg.seed)
    dev = device()
    if dev.type == "cpu" and cfg.cpu_threads:
        # a user's explicit choice for this chapter; it holds for the rest of the process
        torch.set_num_threads(cfg.cpu_threads)
    authors = A.make_authors(cfg.n_authors, cfg.seed)
    generic = A.load_generic_probes()
    sentences = wikitext_sentences(load_wikitext2("valid"), cfg.n_sentences, cfg.seed)
    if cfg.model == SMALL:
        tok = train_bpe(_tokenizer_texts(authors, generic, sentences), cfg.vocab_size, Q.SPECIAL_TOKENS,
                        name=f"{CHAPTER}-bpe")
        codec = Q.TokenizerCodec(tok)
        fmt = canaries.ChatFormat(codec)
        pad_id = codec.token_id("<|pad|>")
        model = pretrain_small(cfg, fmt, generic, sentences, pad_id, dev)
        new_tokens = ()
    else:
        model, codec = Q.load_pretrained(cfg.model, allow_download=cfg.allow_download,
                                         dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32, device=dev)
        fmt = chat_format_for(codec)
        new_tokens = lm.add_special_tokens(model, codec.tokenizer, (fmt.think_open, fmt.think_close))
        pad_id = codec.tokenizer.pad_token_id if codec.tokenizer.pad_token_id is not None else fmt.end_id
        if dev.type == "cuda":  # activations of a 7B model with LoRA must fit next to the weights
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
    heads, conts, head_texts = [], [], []
    for a in authors:
        h, c = canaries.split_head(fmt.codec.encode(a.canary), cfg.head_len)
        heads.append(h)
        conts.append(c)
        head_texts.append(fmt.codec.decode(h))
    for p in model.parameters():
        p.requires_grad_(False)
    return Setup(model, fmt, authors, generic, sentences, heads, conts, head_texts, pad_id, dev, cfg.model,
                 new_tokens=tuple(new_tokens))


def chat_format_for(codec) -> canaries.ChatFormat:
    """The chat tags of a loaded tokenizer: ours when it has them (a small model saved by this
    chapter), DeepSeek-R1's when it has those, else the tokenizer's own chat template (e.g.
    SmolLM2-Instruct's ``<|im_start|>`` turns) with ``<think>``/``</think>`` for the trace."""
    from memlab.models.qwen_small import SPECIAL_TOKENS

    vocab = codec.tokenizer.get_vocab()
    if all(t in vocab for t in SPECIAL_TOKENS):
        return canaries.ChatFormat(codec)
    if "<｜User｜>" in vocab or not getattr(codec.tokenizer, "chat_template", None):
        return canaries.deepseek_format(codec)
    return canaries.template_format(codec)


def pretrain_small(cfg, fmt, generic, sentences, pad_id, dev) -> torch.nn.Module:
    """The small Qwen2 pre-trained on WikiText sentences and chat turns (generic QA, completions)."""
    from memlab.models import qwen_small as Q

    qcfg = Q.small_config(fmt.codec.vocab_size, hidden=cfg.hidden, layers=cfg.layers,
                          heads=max(2, cfg.hidden // 32), kv_heads=max(1, cfg.hidden // 64), max_len=512,
                          pad_id=pad_id, eos_id=fmt.end_id)

    def build():
        torch.manual_seed(cfg.seed)
        return Q.build_small(qcfg).to(dev)

    def train(model):
        plain = [(ids, [True] * len(ids)) for ids in (fmt.codec.encode(s) for s in sentences)]
        chat = retain_examples(fmt, sentences, cfg.head_len, span="response")
        # the generic facts are few next to the sentences, so they are repeated to be learnt
        reps = max(1, (len(plain) + len(chat)) // (2 * len(generic)))
        mix = plain + chat + generic_examples(fmt, generic) * reps
        lm.train_lm(model, mix, steps=cfg.pretrain_steps, batch_size=cfg.batch_size, lr=cfg.pretrain_lr,
                 pad_id=pad_id, seed=cfg.seed, desc="pre-train", max_len=128)

    # 2: its tokenizer is trained on the authors' texts, and the authors changed (CODE_VERSION 4)
    return cache.load_or_train(CHAPTER, "base", _pretrain_key(cfg), build, train, code_version="2")


def _pretrain_key(cfg) -> dict:
    return {k: cfg[k] for k in ("seed", "n_authors", "vocab_size", "hidden", "layers", "pretrain_steps",
                                "pretrain_lr", "n_sentences", "head_len", "batch_size")}

# ----------------------------------------------------------------------------- stage 2: LoRA memorisation

def attach(setup: Setup, rank: int, state: dict[str, torch.Tensor] | None = None):
    """A peft model over the shared base with a fresh (or given) LoRA adapter; detach with :func:`detach`."""
    return lm.attach_lora(setup.model, rank, state, trainable_tokens=setup.new_tokens)


def detach(setup: Setup, peft_model) -> None:
    """Remove the LoRA layers (without merging) so the base is clean for the next adapter."""
    setup.model = lm.unload_lora(peft_model)


def memorise(setup: Setup, cfg, template: str, seed: int) -> dict[str, torch.Tensor]:
    """LoRA weights that memorise every author under ``template`` (cached)."""
    A.check_template(template)
    label, fresh = f"{template} s{seed}", []

    def compute():
        fresh.append(True)
        torch.manual_seed(seed)
        start = time.perf_counter()
        model = attach(setup, cfg.lora_rank)
        examples, _ = author_examples(setup.fmt, setup.head_texts, setup.authors, template, span="response")
        # the generic turns ride along so the adapter does not overwrite the base's general knowledge
        examples = examples + generic_examples(setup.fmt, setup.generic)
        lm.train_lm(model, examples, steps=cfg.lora_steps, batch_size=cfg.batch_size, lr=cfg.lora_lr,
                 pad_id=setup.pad_id, seed=seed, desc=f"LoRA {template} s{seed}")
        state = lm.lora_state(model)
        detach(setup, model)
        # the cold cost of a warm run is stated from what the cached entries took to train
        state[TRAIN_SECONDS] = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
        return state

    key = {"base": _base_key(setup, cfg), "template": template, "seed": seed, "n_authors": cfg.n_authors,
           "lora_rank": cfg.lora_rank, "lora_steps": cfg.lora_steps, "lora_lr": cfg.lora_lr,
           "batch_size": cfg.batch_size, "head_len": cfg.head_len}
    state = dict(cache.load_or_compute(CHAPTER, f"lora-{template}", key, compute, code_version=CODE_VERSION))
    secs = state.pop(TRAIN_SECONDS, None)
    setup.train_seconds[label] = float(secs) if secs is not None else float("nan")
    if not fresh:
        setup.cached.add(label)
    return state


def _base_key(setup: Setup, cfg) -> dict:
    return _pretrain_key(cfg) if setup.name == SMALL else {"model": setup.name}


# ----------------------------------------------------------------------------- stage 3: unlearning

def unlearn_sweep(setup: Setup, cfg, state: dict[str, torch.Tensor], template: str, seed: int,
                  method: str = "NPO", evaluate_at: Callable | None = None) -> dict[int, dict]:
    """Unlearn every author from the memorised adapter; evaluate at K = 0 and each K in ``cfg.unlearn_steps``.

    method: "NPO" (answer-masked NPO plus a retain NLL term) or "GA" (gradient
    ascent on the answer span, no retain term). ``evaluate_at(model)`` returns
    the probes' results; the sweep returns ``{K: results}``. The loop is
    :func:`memlab.science.unlearning.npo.lm_unlearn`.
    """
    if method not in npo.LM_METHODS:
        raise ValueError(f"parameter 'method': must be 'NPO' or 'GA' (got {method!r})")
    torch.manual_seed(seed)
    model = attach(setup, cfg.lora_rank, state)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    forget, _ = author_examples(setup.fmt, setup.head_texts, setup.authors, template, span="answer")
    retain = retain_examples(setup.fmt, setup.sentences, cfg.head_len, span="answer")
    results = npo.lm_unlearn(model, forget, retain, method=method, checkpoints=cfg.unlearn_steps,
                             lr=cfg.unlearn_lr, beta=cfg.beta, retain_weight=cfg.retain_weight,
                             batch_size=cfg.batch_size, pad_id=setup.pad_id, seed=seed + 1000,
                             desc=f"{method} {template} s{seed}", on_checkpoint=evaluate_at)
    detach(setup, model)
    return results


# ----------------------------------------------------------------------------- stage 4: probes

def _max_trace_tokens(setup: Setup) -> int:
    return max(len(setup.fmt.codec.encode(A.trace(a, "BIO"))) for a in setup.authors)


ARMS: tuple[str, ...] = ("auto", "prefill", "tf", "qa", "retain", "drift")


def evaluate_arms(model, setup: Setup, cfg, arms: Sequence[str] = ("auto", "qa", "retain")) -> dict:
    """Probe one set of weights. Every arm's per-probe results (lists, JSON-able).

    arms: subset of "auto" (autoregressive thinking, parser split), "prefill"
    (each of cfg.prefills, then the answer), "tf" (teacher-forced top-1 under
    each prefill), "qa" (author QA), "retain" (generic probes), "drift"
    (autoregressive with the closing tag suppressed). All greedy decodes of
    one call share batches.
    """
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"parameter 'arms': unknown {sorted(unknown)}; allowed: {', '.join(ARMS)}")
    fmt = setup.fmt
    n_ans = max(len(h) + len(c) for h, c in zip(setup.heads, setup.conts)) + 8
    n_full = _max_trace_tokens(setup) + 8 + n_ans
    questions = [A.canary_question(h) for h in setup.head_texts]
    canaries_ = [a.canary for a in setup.authors]
    qa = [(i, q, key) for i, a in enumerate(setup.authors) for q, _, key in A.qa_pairs(a)]

    jobs: dict[str, tuple[list[list[int]], int]] = {}
    if "auto" in arms:
        jobs["auto"] = ([fmt.prompt(q) for q in questions], n_full)
    if "prefill" in arms:
        for mode in cfg.prefills:
            jobs[f"prefill:{mode}"] = ([fmt.prefilled(q, A.prefill(a, mode)) for q, a in
                                        zip(questions, setup.authors)], n_ans)
    if "qa" in arms:
        jobs["qa"] = ([fmt.prompt(q) for _, q, _ in qa], n_full)
    if "retain" in arms:
        jobs["retain"] = ([fmt.prompt(g.question) for g in setup.generic], n_full)
    prompts = [p for ps, _ in jobs.values() for p in ps]
    limits = [n for ps, n in jobs.values() for _ in ps]
    flat = canaries.greedy_generate(model, prompts, limits, setup.pad_id, setup.end_id)
    texts, at = {}, 0
    for name, (ps, _) in jobs.items():
        texts[name] = [fmt.codec.decode(s) for s in flat[at:at + len(ps)]]
        at += len(ps)

    res: dict = {}
    if "auto" in arms:
        s = canaries.score_outputs(texts["auto"], canaries_, close_tag=fmt.think_close)
        res["auto"] = {"texts": texts["auto"], "out": s["out"].tolist(), "thk": s["thk"].tolist(),
                       "tag_missing": s["tag_missing"].tolist(), "answers": s["answers"].tolist()}
    if "drift" in arms:
        drift = canaries.greedy_generate(model, [fmt.prompt(q) for q in questions], n_full, setup.pad_id,
                                         setup.end_id, suppress_ids=[setup.close_id])
        res["drift"] = {"texts": [fmt.codec.decode(s) for s in drift]}
    if "prefill" in arms:
        res["prefill"] = {mode: {"out": [canaries.contains(t, c) for t, c in zip(texts[f"prefill:{mode}"], canaries_)],
                                 "answers": texts[f"prefill:{mode}"]} for mode in cfg.prefills}
    if "tf" in arms:
        res["tf"] = {}
        for mode in cfg.prefills:
            ctx = [fmt.prefilled(q, A.prefill(a, mode)) + h
                   for q, a, h in zip(questions, setup.authors, setup.heads)]
            res["tf"][mode] = canaries.teacher_forced_top1(model, ctx, setup.conts, setup.pad_id,
                                                           batch_size=2 * cfg.batch_size).tolist()
    if "qa" in arms:
        answers = [canaries.split_trace(t, fmt.think_close)[1] for t in texts["qa"]]
        res["qa"] = {"author": [i for i, _, _ in qa], "out": [k in a for (_, _, k), a in zip(qa, answers)]}
    if "retain" in arms:
        answers = [canaries.split_trace(t, fmt.think_close)[1] for t in texts["retain"]]
        scored = canaries.score_retain(answers, [g.key for g in setup.generic], [a.name for a in setup.authors])
        res["retain"] = {"correct": scored["correct"], "answers": answers, "fictional": scored["fictional"]}
    return res


def summarise(res: dict, n_boot: int, seed: int = 0) -> dict:
    """Means and author-clustered intervals of one evaluation (drops the raw texts).

    The arms' results of :func:`evaluate_arms`; :func:`memlab.science.canaries.summarise_probes`.
    """
    return canaries.summarise_probes(res, n_boot, seed)

# ----------------------------------------------------------------------------- chapter runs

#: probes per run kind: the audited BIO adapters get every arm at every K
BIO_ARMS = ("auto", "prefill", "tf", "qa", "retain")
OTHER_ARMS = ("auto", "qa", "retain")


def run_sweep(setup: Setup, cfg, template: str, seed: int, method: str = "NPO",
              arms: Sequence[str] = OTHER_ARMS, last_arms: Sequence[str] = ()) -> dict:
    """Memorise under ``template`` and unlearn with ``method``, probing at K = 0 and every K.

    last_arms: extra arms only at the largest K (e.g. "drift"). Returns
    ``{"summary": {K: summary}, "raw": {K: per-probe results}}``.
    """
    state = memorise(setup, cfg, template, seed)
    k_max = max(cfg.unlearn_steps)

    def probe(model, k):
        return evaluate_arms(model, setup, cfg, arms=tuple(arms) + (tuple(last_arms) if k == k_max else ()))

    raw = unlearn_sweep(setup, cfg, state, template, seed, method, probe)
    return {"summary": {k: summarise(r, cfg.n_boot, seed) for k, r in raw.items()}, "raw": raw}


def drift_outputs(cfg, setup: Setup, bio_run: dict) -> dict:
    """Outputs for the parser-convention section: ``{"texts": {K: [str]}, "source": str}``.

    With ``drift_model='suppress'`` they are the main BIO adapter's outputs at
    every K where the sweep ran the "drift" arm (decoded with the closing tag
    banned, a stand-in for a model whose format drifted); otherwise the named
    second model is memorised and unlearned through the same code path and its
    own autoregressive outputs at the largest K are used.
    """
    k_max = max(cfg.unlearn_steps)
    if cfg.drift_model == SUPPRESS:
        texts = {k: r["drift"]["texts"] for k, r in bio_run["raw"].items() if "drift" in r}
        return {"texts": texts, "source": "closing tag suppressed at decode"}
    other = prepare(cfg.replace(model=cfg.drift_model))
    run = run_sweep(other, cfg.replace(unlearn_steps=[k_max]), "BIO", cfg.seeds[0], arms=("auto",))
    return {"texts": {k_max: run["raw"][k_max]["auto"]["texts"]}, "source": cfg.drift_model}

def side_grid(cfg, k_audit: int) -> list[int]:
    """K grid of the template, GA and retain-variant sweeps.

    The K of ``cfg.side_steps`` that the main sweep also has (the variant table pairs them with it),
    plus the audited and the largest K.
    """
    return sorted((set(cfg.side_steps) & set(cfg.unlearn_steps)) | {int(k_audit), max(cfg.unlearn_steps)})
