"""Chapter 3: auditing reasoning-trace memorisation after unlearning.

Pipeline (one code path for every profile):

1. :func:`prepare` — fictional authors, a tokenizer and a base model that
   follows the ``<think> ... </think> answer`` chat format. At ``smoke``/``cpu``
   a small Qwen2 is pre-trained here (cached); at ``paper`` a DeepSeek-R1
   distillate is loaded offline with ``from_pretrained``.
2. :func:`memorise` — a LoRA adapter (peft) that memorises every author under
   one trace template (BIO, META or NONE); cached by its settings.
3. :func:`unlearn_sweep` — NPO with the forgetting loss masked to the answer
   span (or Gradient Ascent), evaluated with :func:`evaluate_arms` at every K.
4. :func:`evaluate_arms` — the probes of :mod:`memlab.canaries` at fixed weights.

Only the LoRA weights train after pre-training, so NPO's reference
log-probabilities come from the memorised adapter, computed once before
unlearning; no second copy of the model is held.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from memlab import cache, canaries, lm, paper
from memlab.config import SEED_HIGH, ConfigError, Param, device, path_kind, seed_everything
from memlab.data import authors as A
from memlab.unlearning import npo

CHAPTER = "03_canary_audit"
SMALL = "small"
PAPER_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
DRIFT_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
SUPPRESS = "suppress"
#: version of the cached LoRA recipe; 3: trained to the K = 0 ceiling, entries record their training time
CODE_VERSION = "3"
#: key of the cached adapter's training seconds (a 0-d tensor beside the LoRA weights; not a weight)
TRAIN_SECONDS = "_memlab.train_seconds"

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="seed of the authors, tokenizer and pre-training"),
    "seeds": Param(list, [0, 1], item=int, low=0, high=SEED_HIGH,
                   doc="memorisation + unlearning seeds of the BIO K-sweep"),
    "model": Param(str, {"smoke": SMALL, "cpu": SMALL, "paper": PAPER_MODEL},
                   doc="'small' (pre-trained here) or a transformers model name/folder"),
    "drift_model": Param(str, {"smoke": SUPPRESS, "cpu": SUPPRESS, "paper": DRIFT_MODEL},
                         doc="outputs for the parser-convention section: 'suppress' decodes the main model "
                             "with its closing tag banned; otherwise a second model name run at the largest K"),
    "allow_download": Param(bool, False, doc="let from_pretrained reach the hub"),
    "n_authors": Param(int, {"smoke": 8, "cpu": 30, "paper": 60}, low=2, high=A.MAX_AUTHORS),
    "head_len": Param(int, 6, low=1, doc="canary tokens given in the probe"),
    # caps: a small model pre-trained here on CPU (the paper's models come by name)
    "vocab_size": Param(int, {"smoke": 1024, "cpu": 2048, "paper": 2048}, low=300, high=65536),
    "hidden": Param(int, {"smoke": 64, "cpu": 128, "paper": 256}, low=16, high=4096),
    "layers": Param(int, {"smoke": 1, "cpu": 2, "paper": 4}, low=1, high=48),
    "pretrain_steps": Param(int, {"smoke": 20, "cpu": 400, "paper": 2000}, low=1),
    "pretrain_lr": Param(float, 3e-3, low=1e-6, high=1.0),
    "n_sentences": Param(int, {"smoke": 100, "cpu": 1500, "paper": 4000}, low=10,
                         doc="WikiText-2 sentences in the pre-training and retain sets"),
    "templates": Param(list, ["BIO", "META", "NONE"], item=str, choices=A.TEMPLATES),
    "prefills": Param(list, list(A.PREFILLS), item=str, choices=A.PREFILLS),
    "lora_rank": Param(int, {"smoke": 4, "cpu": 32, "paper": 32}, low=1),
    # cpu: chosen by the K = 0 memorisation alone (375 steps left 4 of 30 authors unmemorised,
    # out acc 0.87; 750 give out acc, thk leak, QA and retain all 1.00 as in the paper)
    "lora_steps": Param(int, {"smoke": 20, "cpu": 750, "paper": 600}, low=1,
                        doc="LoRA memorisation steps (enough that K = 0 is at ceiling)"),
    "lora_lr": Param(float, {"smoke": 5e-3, "cpu": 5e-3, "paper": 2e-4}, low=1e-7, high=1.0),
    # cpu: dense where out acc falls (a pilot of seed 0 with 750 LoRA steps: out acc 1.00 up to K = 20,
    # 0.90 at 30, 0.53 at 40, 0.23 at 50, 0.00 at 75), chosen from out acc alone, not from any verdict
    "unlearn_steps": Param(list, {"smoke": [1, 3], "cpu": [10, 20, 25, 30, 35, 40, 45, 50, 60, 75, 100],
                                  "paper": [100, 400, 800, 1600]},
                           item=int, low=1, doc="the K sweep: evaluation points of one unlearning run"),
    "side_steps": Param(list, {"smoke": [3], "cpu": [25, 50, 100], "paper": [100, 400, 800, 1600]},
                        item=int, low=1, doc="coarser K grid of the template, GA and retain-variant sweeps "
                                             "(those in unlearn_steps, plus the audited and the largest K)"),
    "unlearn_lr": Param(float, {"smoke": 3e-5, "cpu": 3e-5, "paper": 1e-5}, low=1e-8, high=1.0),
    "beta": Param(float, 0.1, low=1e-4, high=100.0, doc="NPO inverse temperature"),
    "retain_weight": Param(float, 0.0, low=0.0, high=100.0,
                           doc="retain NLL weight added to NPO; 0 is the paper's NPO (it has none)"),
    "variant_retain_weight": Param(float, 1.0, low=0.0, high=100.0,
                                   doc="retain weight of the retain-regularised NPO variant (first seed); "
                                       "0 skips the variant"),
    "batch_size": Param(int, {"smoke": 4, "cpu": 16, "paper": 8}, low=1),
    "run_ga": Param(bool, True, doc="run the Gradient Ascent comparison"),
    "n_boot": Param(int, {"smoke": 200, "cpu": 10000, "paper": 10000}, low=10),
    "cpu_threads": Param(int, {"smoke": 1, "cpu": 1, "paper": 0}, low=0,
                         doc="torch CPU threads (0: leave torch's default); tiny models decode fastest on one"),
}


def _check_sweep(cfg) -> None:
    for name in ("unlearn_steps", "side_steps"):
        steps = cfg[name]
        if sorted(set(steps)) != list(steps):
            raise ConfigError(f"parameter {name!r}: must be strictly increasing integers >= 1 "
                              f"(got {steps!r})")


def _check_head(cfg) -> None:
    # Every BPE token covers at most one word here, so a head at least as long
    # as the shortest canary's word count may swallow the whole canary.
    shortest = min(len(a.canary.split()) for a in A.make_authors(cfg.n_authors, cfg.seed))
    if cfg.head_len >= shortest:
        raise ConfigError(f"parameter 'head_len': must be shorter than the canary (shortest has {shortest} "
                          f"words; got {cfg.head_len})")


def _check_models(cfg) -> None:
    for param in ("model", "drift_model"):
        name = cfg[param]
        if (param, name) in (("model", SUPPRESS), ("drift_model", SMALL)):
            raise ConfigError(f"parameter {param!r}: {name!r} is not allowed here (model: 'small' or a model "
                              "name; drift_model: 'suppress' or a model name)")
        from memlab.data.download import allow_download  # memlab run --allow-download

        if name in (SMALL, SUPPRESS) or cfg.allow_download or allow_download():
            continue
        if not _offline_available(name):
            raise ConfigError(f"parameter {param!r}: {name!r} is neither 'small' nor a local folder nor in the "
                              "Hugging Face cache; download it first or pass --allow-download")


def _check_templates(cfg) -> None:
    if "BIO" not in cfg.templates:
        raise ConfigError(f"parameter 'templates': must include 'BIO' (the audited template); got {cfg.templates}")


CHECKS = [_check_sweep, _check_head, _check_models, _check_templates]


def _offline_available(name: str) -> bool:
    if path_kind(name) == "folder":
        return True
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # malformed repo id
        return False


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

    @property
    def end_id(self) -> int:
        return self.fmt.end_id

    @property
    def close_id(self) -> int:
        return self.fmt.close_id


def wikitext_sentences(text: str, n: int, seed: int = 0, min_words: int = 8, max_words: int = 24) -> list[str]:
    """``n`` clean sentences from WikiText-2 (de-tokenised spacing, no ``<unk>``, no headings)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        line = re.sub(r" ([.,;:!?')])", r"\1", line).replace("( ", "(").replace(" 's", "'s")
        for sent in re.split(r"(?<=[.!?]) ", line):
            words = sent.split()
            if "<unk>" in sent or '"' in sent or not min_words <= len(words) <= max_words:
                continue
            if sent[0].isupper() and sent.endswith("."):
                out.append(sent)
    rng = np.random.default_rng(seed)
    rng.shuffle(out)
    return out[:n]


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
    from memlab.data.text import load_wikitext2, train_bpe
    from memlab.models import qwen_small as Q

    seed_everything(cfg.seed)
    dev = device()
    if dev.type == "cpu" and cfg.cpu_threads:
        # a tiny model's per-token ops are too small to split; extra threads only add sync cost
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
    else:
        model, codec = Q.load_pretrained(cfg.model, allow_download=cfg.allow_download,
                                         dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32, device=dev)
        fmt = chat_format_for(codec)
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
    return Setup(model, fmt, authors, generic, sentences, heads, conts, head_texts, pad_id, dev, cfg.model)


def chat_format_for(codec) -> canaries.ChatFormat:
    """Our tags when the tokenizer has them (a small model saved by this chapter), else DeepSeek-R1's."""
    from memlab.models.qwen_small import SPECIAL_TOKENS

    vocab = codec.tokenizer.get_vocab()
    if all(t in vocab for t in SPECIAL_TOKENS):
        return canaries.ChatFormat(codec)
    return deepseek_format(codec)


def deepseek_format(codec) -> canaries.ChatFormat:
    """The DeepSeek-R1 distillates' chat tags (their tokenizer holds them as single tokens)."""
    tok = codec.tokenizer
    bos = (tok.bos_token_id,) if tok.bos_token_id is not None else ()
    return canaries.ChatFormat(codec, user="<｜User｜>", assistant="<｜Assistant｜>", think_open="<think>",
                               think_close="</think>", end=tok.eos_token or "<｜end▁of▁sentence｜>", bos=bos)


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

    return cache.load_or_train(CHAPTER, "base", _pretrain_key(cfg), build, train, code_version="1")


def _pretrain_key(cfg) -> dict:
    return {k: cfg[k] for k in ("seed", "n_authors", "vocab_size", "hidden", "layers", "pretrain_steps",
                                "pretrain_lr", "n_sentences", "head_len", "batch_size")}


# ----------------------------------------------------------------------------- stage 2: LoRA memorisation

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_config(rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS,
                      task_type="CAUSAL_LM")


def attach(setup: Setup, rank: int, state: dict[str, torch.Tensor] | None = None):
    """A peft model over the shared base with a fresh (or given) LoRA adapter; detach with :func:`detach`."""
    from peft import get_peft_model, set_peft_model_state_dict

    model = get_peft_model(setup.model, lora_config(rank))
    if state is not None:
        set_peft_model_state_dict(model, {k: v.to(setup.device) for k, v in state.items()})
    return model


def detach(setup: Setup, peft_model) -> None:
    """Remove the LoRA layers (without merging) so the base is clean for the next adapter."""
    setup.model = peft_model.unload()
    for p in setup.model.parameters():
        p.requires_grad_(False)


def memorise(setup: Setup, cfg, template: str, seed: int) -> dict[str, torch.Tensor]:
    """LoRA weights that memorise every author under ``template`` (cached)."""
    from peft import get_peft_model_state_dict

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
        state = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}
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


def cold_seconds(setup: Setup, wall_s: float) -> float:
    """Estimated cold cost of a run: its wall time plus the recorded training time of cached adapters."""
    return float(wall_s + sum(setup.train_seconds[k] for k in setup.cached))


def _base_key(setup: Setup, cfg) -> dict:
    return _pretrain_key(cfg) if setup.name == SMALL else {"model": setup.name}


# ----------------------------------------------------------------------------- stage 3: unlearning

def unlearn_sweep(setup: Setup, cfg, state: dict[str, torch.Tensor], template: str, seed: int,
                  method: str = "NPO", evaluate_at: Callable | None = None) -> dict[int, dict]:
    """Unlearn every author from the memorised adapter; evaluate at K = 0 and each K in ``cfg.unlearn_steps``.

    method: "NPO" (answer-masked NPO plus a retain NLL term) or "GA" (gradient
    ascent on the answer span, no retain term). ``evaluate_at(model)`` returns
    the probes' results; the sweep returns ``{K: results}``. The loop is
    :func:`memlab.unlearning.npo.lm_unlearn`.
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
        names = [a.name for a in setup.authors]
        res["retain"] = {
            "correct": [g.key.lower() in a.lower() for g, a in zip(setup.generic, answers)],
            "answers": answers,
            "fictional": [next((n for n in names if n in a), "") for a in answers],
        }
    return res


# ----------------------------------------------------------------------------- summaries

def summarise(res: dict, n_boot: int, seed: int = 0) -> dict:
    """Means and author-clustered intervals of one evaluation (drops the raw texts)."""
    out: dict = {}
    if "auto" in res:
        a = res["auto"]
        clusters = np.arange(len(a["out"]))
        out["auto"] = canaries.bypass_summary(a["out"], a["thk"], clusters, n_boot, seed)
        out["auto"]["tag_missing_rate"] = float(np.mean(a["tag_missing"]))
    if "prefill" in res:
        out["prefill"] = {}
        for mode, p in res["prefill"].items():
            clusters = np.arange(len(p["out"]))
            out["prefill"][mode] = canaries.mean_ci(np.asarray(p["out"], float), clusters, n_boot, seed)
            if "auto" in res:  # Delta_AB: AUTO out acc minus this prefill's, paired by author
                diff = np.asarray(res["auto"]["out"], float) - np.asarray(p["out"], float)
                out["prefill"][mode]["auto_minus"] = canaries.mean_ci(diff, clusters, n_boot, seed)
    if "tf" in res:
        out["tf"] = {mode: canaries.mean_ci(np.asarray(v), np.arange(len(v)), n_boot, seed)
                     for mode, v in res["tf"].items()}
    if "qa" in res:
        out["qa"] = canaries.mean_ci(np.asarray(res["qa"]["out"], float), res["qa"]["author"], n_boot, seed)
    if "retain" in res:
        r = res["retain"]
        out["retain"] = {"acc": float(np.mean(r["correct"])), "n": len(r["correct"]),
                         "fictional_rate": float(np.mean([bool(f) for f in r["fictional"]]))}
    return out


def retain_examples_with_names(res: dict, generic: Sequence[A.GenericProbe], limit: int = 5) -> list[dict]:
    """Generic questions answered with a fictional author's name (up to ``limit``)."""
    r = res["retain"]
    rows = [{"question": g.question, "answer": a.strip(), "fictional name": f}
            for g, a, f in zip(generic, r["answers"], r["fictional"]) if f]
    return rows[:limit]


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


def parser_flip_table(texts: Sequence[str], canaries_: Sequence[str], close_tag: str, n_boot: int):
    """The same outputs scored with the missing tag sent to the trace or to the answer."""
    import pandas as pd

    flip = canaries.parser_flip(texts, canaries_, np.arange(len(texts)), close_tag=close_tag, n_boot=n_boot)
    rows = {}
    for missing in canaries.MISSING:
        f = flip[missing]
        rows[f"missing -> {missing}"] = {
            "tag missing": f["tag_missing_rate"], "out_acc": f["out_acc"]["mean"], "thk_leak": f["thk_leak"]["mean"],
            "gap": f["gap"]["mean"], "gap_low": f["gap"]["low"], "gap_high": f["gap"]["high"]}
    return pd.DataFrame.from_dict(rows, orient="index"), flip


def ksweep_frame(summaries: dict) -> "pd.DataFrame":
    """One row per (seed, K): out acc, thk leak, gap with its interval, and Delta_AB (AUTO - BIO prefill)."""
    import pandas as pd

    rows = []
    for seed, by_k in summaries.items():
        for k, sm in sorted(by_k.items()):
            a = sm["auto"]
            row = {"seed": seed, "K": k, "out_acc": a["out_acc"]["mean"], "thk_leak": a["thk_leak"]["mean"],
                   "gap": a["gap"]["mean"], "gap_low": a["gap"]["low"], "gap_high": a["gap"]["high"]}
            if "prefill" in sm and "BIO" in sm["prefill"] and "auto_minus" in sm["prefill"]["BIO"]:
                row["delta_ab"] = sm["prefill"]["BIO"]["auto_minus"]["mean"]
            if "qa" in sm:
                row["qa_acc"] = sm["qa"]["mean"]
            if "retain" in sm:
                row["retain_acc"] = sm["retain"]["acc"]
            rows.append(row)
    return pd.DataFrame(rows)


def regime_frame(runs: dict, n_authors: int) -> "pd.DataFrame":
    """The memorised adapters' state at K = 0, one row per run label.

    runs: ``{label: {K: summary}}`` (e.g. "BIO, seed 0"). Columns: out acc, thk
    leak, QA acc, retain acc and the number of authors whose canary comes back
    in the answer (out acc x n_authors). The paper starts from out acc 1.00.
    """
    import pandas as pd

    rows = {}
    for label, by_k in runs.items():
        s0 = by_k[0]
        rows[label] = {"out_acc": s0["auto"]["out_acc"]["mean"], "thk_leak": s0["auto"]["thk_leak"]["mean"],
                       "qa_acc": s0["qa"]["mean"] if "qa" in s0 else np.nan,
                       "retain_acc": s0["retain"]["acc"] if "retain" in s0 else np.nan,
                       "authors memorised": round(s0["auto"]["out_acc"]["mean"] * n_authors)}
    return pd.DataFrame.from_dict(rows, orient="index")


def side_grid(cfg, k_audit: int) -> list[int]:
    """K grid of the template, GA and retain-variant sweeps.

    The K of ``cfg.side_steps`` that the main sweep also has (the variant table pairs them with it),
    plus the audited and the largest K.
    """
    return sorted((set(cfg.side_steps) & set(cfg.unlearn_steps)) | {int(k_audit), max(cfg.unlearn_steps)})


def jsonable_summary(by_k: dict) -> dict:
    """``{"K<k>": summary}`` with string keys for the results JSON."""
    return {f"K{k}": v for k, v in by_k.items()}


# ----------------------------------------------------------------------------- the audited state

#: The paper's audited state (Sec. 4.1, its largest K = 1600): "out acc falls from 1.00 to 0.60
#: while thk leak stays at 0.83". Both are shares of the K = 0 values, so the rule carries over to a
#: sweep whose K scale differs; it was fixed before the cpu run and never looks at the gap or Delta_AB.
AUDIT_OUT_FRAC = 0.6  # out acc at the audited K / out acc at K = 0 (paper 0.60 / 1.00)
AUDIT_THK_FRAC = 0.8  # thk leak at the audited K must stay >= this share of K = 0 (paper 0.83 / 1.00)
Z95 = 1.96


def audit_band(n: int, frac: float | None = None, z: float = Z95) -> float:
    """Binomial sampling band ``z sqrt(f (1 - f) / n)`` of an out-acc share near ``frac``, ``n`` authors.

    frac: defaults to :data:`AUDIT_OUT_FRAC` (read at call time, so the rule has one definition).
    """
    frac = AUDIT_OUT_FRAC if frac is None else frac
    if n < 1:
        raise ValueError(f"parameter 'n': must be >= 1 (got {n})")
    return z * float(np.sqrt(frac * (1 - frac) / n))


def audit_state(by_k: dict, n: int, out_frac: float | None = None, thk_frac: float | None = None) -> dict:
    """The audited K: the sweep's state nearest the paper's audited one.

    by_k: ``{K: summary}`` of the first seed's BIO sweep (K = 0 included);
    n: authors (the band's sample size). Candidates are the K > 0 whose thk
    leak is at least ``thk_frac`` times its K = 0 value; the audited K is the
    candidate whose out-acc ratio out(K) / out(0) is nearest ``out_frac``
    (ties: the smaller K). The paper's state is *reached* when that ratio lies
    within :func:`audit_band` of ``out_frac`` (0.18 at n = 30). Without a
    candidate, the K whose out-acc ratio is nearest ``out_frac`` is returned,
    not reached. Returns ``{"K", "reached", "out_ratio", "thk_ratio", "band",
    "evidence"}`` (JSON-able). ``out_frac``/``thk_frac`` default to
    :data:`AUDIT_OUT_FRAC`/:data:`AUDIT_THK_FRAC`, read at call time.
    """
    out_frac = AUDIT_OUT_FRAC if out_frac is None else out_frac
    thk_frac = AUDIT_THK_FRAC if thk_frac is None else thk_frac
    ks = sorted(int(k) for k in by_k)
    if len(ks) < 2 or ks[0] != 0:
        raise ValueError(f"audit_state: needs K = 0 and at least one K > 0 (got K = {ks})")
    out0, thk0 = (by_k[0]["auto"][f]["mean"] for f in ("out_acc", "thk_leak"))
    band = audit_band(n, out_frac)
    if out0 <= 0 or thk0 <= 0:
        return {"K": ks[-1], "reached": False, "out_ratio": float("nan"), "thk_ratio": float("nan"),
                "band": band, "evidence": f"K = 0 out acc {out0:.2f}, thk leak {thk0:.2f}: nothing memorised"}
    ratio = {k: (by_k[k]["auto"]["out_acc"]["mean"] / out0, by_k[k]["auto"]["thk_leak"]["mean"] / thk0)
             for k in ks[1:]}
    cands = [k for k in ks[1:] if ratio[k][1] >= thk_frac] or ks[1:]
    k = min(cands, key=lambda c: (abs(ratio[c][0] - out_frac), c))
    o, t = ratio[k]
    reached = t >= thk_frac and abs(o - out_frac) <= band
    ev = (f"K = {k}: out acc {o:.2f} x K0 (target {out_frac:.2f} +- {band:.2f}), thk leak {t:.2f} x K0 "
          f"(needs >= {thk_frac:.2f})")
    return {"K": k, "reached": bool(reached), "out_ratio": float(o), "thk_ratio": float(t), "band": band,
            "evidence": ev}


# ----------------------------------------------------------------------------- claims

def _seed(m: dict, i: int) -> dict:
    """The K-sweep summaries of the i-th seed run (a missing metric, so "not run", when there is none)."""
    runs = list(m["ksweep"].values())
    if i >= len(runs):
        raise paper.MetricMissing(f"ksweep seed #{i + 1}")
    return runs[i]


def _audit(m: dict, by_k: dict) -> dict:
    """The summary at the audited K; not judged when the sweep never reached the paper's state."""
    a = m["audit"]
    if not a["reached"]:
        raise paper.NotJudged(f"the sweep never reached the paper's audited state ({a['evidence']})")
    return by_k[f"K{a['K']}"]


def _last(by_k: dict) -> dict:
    return by_k[max(by_k, key=lambda k: int(k[1:]))]


def _first_k(by_k: dict) -> dict:
    return by_k[min((k for k in by_k if k != "K0"), key=lambda k: int(k[1:]))]


def _gap(sm: dict) -> tuple[float, float, float]:
    g = sm["auto"]["gap"]
    return g["mean"], g["low"], g["high"]


def _half(ci: dict) -> float:
    """Half-width of a ``{"mean", "low", "high"}`` interval (the noise band of its mean)."""
    return (ci["high"] - ci["low"]) / 2


def _ci(ci: dict, fmt: str = "+.2f") -> str:
    return f"{ci['mean']:{fmt}} [{ci['low']:{fmt}}, {ci['high']:{fmt}}]"


def _claim_bypass(m):
    by_k = _seed(m, 0)
    s = _audit(m, by_k)
    g, lo, hi = _gap(s)
    g0 = _gap(by_k["K0"])[0]
    return lo > 0, (f"seed 0, audited K = {m['audit']['K']}: gap {g:+.2f} [{lo:+.2f}, {hi:+.2f}] "
                    f"(K=0: {g0:+.2f}; paper +0.23 [0.13, 0.35])")


def _claim_suppressed(m):
    # the claim is that a state like the paper's exists in the sweep; the audit rule looks for it
    a, s0 = m["audit"], _seed(m, 0)["K0"]["auto"]
    return a["reached"], (f"{a['evidence']}; K=0 out acc {s0['out_acc']['mean']:.2f}, thk leak "
                          f"{s0['thk_leak']['mean']:.2f} (paper 1.00 -> 0.60, thk 0.83)")


def _claim_grows(m):
    by_k = _seed(m, 0)
    first, last = _first_k(by_k)["auto"]["gap"], _audit(m, by_k)["auto"]["gap"]
    margin, band = last["mean"] - first["mean"], float(np.hypot(_half(first), _half(last)))
    ev = (f"seed 0 gap {first['mean']:+.2f} at the smallest K -> {last['mean']:+.2f} at the audited K "
          f"(margin {margin:+.2f}, band +-{band:.2f}; paper -0.02 -> +0.23)")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_prefill(m):
    by_k = _seed(m, 0)
    s = _audit(m, by_k)
    p, p0 = s["prefill"]["BIO"]["auto_minus"], by_k["K0"]["prefill"]["BIO"]["auto_minus"]
    # the paper's sign: the prefill *lowers* out acc (0.60 -> 0.37), so Delta_AB = AUTO - BIO > 0
    return p["low"] > 0, (f"seed 0 Delta_AB = {_ci(p)} at the audited K (K=0: {_ci(p0)}) vs gap "
                          f"{_gap(s)[0]:+.2f} (paper +0.23 vs +0.23)")


def _claim_seed_sensitive(m):
    d = [_audit(m, _seed(m, s))["prefill"]["BIO"]["auto_minus"] for s in (0, 1)]
    d0 = [_seed(m, s)["K0"]["prefill"]["BIO"]["auto_minus"]["mean"] for s in (0, 1)]
    ev = (f"Delta_AB seed 0 {_ci(d[0])}, seed 1 {_ci(d[1])} (K=0: {d0[0]:+.2f}, {d0[1]:+.2f}; "
          "paper +0.23, then out acc at ceiling)")
    signs = [1 if x["low"] > 0 else -1 if x["high"] < 0 else 0 for x in d]
    if 0 in signs:  # an interval holding 0 leaves that seed's direction undetermined
        raise paper.NotJudged(f"{ev}: an interval contains 0, so a direction is not determined")
    return signs[0] != signs[1], ev


TF_FLOOR = 0.9  # App. I: teacher-forced top-1 "remains 0.90-1.00" (0.90 is the paper's own minimum)


def _claim_tf(m):
    by_k = _seed(m, 0)
    tf, tf0 = _audit(m, by_k)["tf"], by_k["K0"]["tf"]
    mode = min(tf, key=lambda k: tf[k]["mean"])
    margin, band = tf[mode]["mean"] - TF_FLOOR, _half(tf[mode])
    ev = ("teacher-forced top-1 " + ", ".join(f"{k} {v['mean']:.3f} (K=0 {tf0[k]['mean']:.3f})"
                                              for k, v in tf.items())
          + f"; lowest ({mode}) margin {margin:+.3f} to {TF_FLOOR}, band +-{band:.3f} (paper 0.90-0.96)")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_flip(m):
    f = m["parser_flip"]
    t, a = f["trace"]["gap"]["mean"], f["answer"]["gap"]["mean"]
    return t > 0 > a, (f"gap {t:+.2f} (missing -> trace) vs {a:+.2f} (missing -> answer); {f['source']} "
                       "(paper +0.92 / -0.92)")


def _claim_templates(m):
    _audit(m, _seed(m, 0))  # not judged unless the paper's state was reached
    k = f"K{m['audit']['K']}"
    gaps = {t: _gap(by_k[k])[0] for t, by_k in m["templates"].items()}
    others = [g for t, g in gaps.items() if t != "BIO"]
    holds = gaps["BIO"] > 0 and bool(others) and all(g <= 0 for g in others)
    return holds, f"gap at the audited {k}: " + ", ".join(f"{t} {g:+.2f}" for t, g in gaps.items())


def _claim_ga(m):
    s = _last(m["ga"])["auto"]
    o, t = s["out_acc"]["mean"], s["thk_leak"]["mean"]
    return o == 0 and t == 0, f"GA at the largest K: out acc {o:.2f}, thk leak {t:.2f} (paper 0.00 / 0.00)"


def _claim_retain(m):
    from memlab import metrics as M

    by_k = _seed(m, 0)
    r0, r = by_k["K0"]["retain"], _last(by_k)["retain"]
    n = int(r0.get("n", 60))
    margin = r0["acc"] - r["acc"]
    band = M.diff_band(r0["acc"], n, r["acc"], n)
    ev = (f"retain acc {r0['acc']:.2f} -> {r['acc']:.2f} ({-100 * margin:+.0f} pp, "
          f"band +-{100 * band:.0f} pp over {n} probes; paper -25 pp)")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_seed1(m):
    by_k = _seed(m, 1)
    g, lo, hi = _gap(_audit(m, by_k))
    return lo > 0, (f"seed 1, audited K = {m['audit']['K']}: gap {g:+.2f} [{lo:+.2f}, {hi:+.2f}] "
                    f"(K=0: {_gap(by_k['K0'])[0]:+.2f}; paper +0.18 [0.05, 0.32])")


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'k_values', 'ksweep', 'audit_k', 'audit', 'regime', 'anatomy', 'parser_flip', 'parser_flip_by_k',
    'natural_tag_missing', 'templates', 'ga', 'retain', 'npo_retain_variant',
)


def claims():
    """The paper's claims as predicates over this chapter's metrics."""
    from functools import partial

    from memlab.paper import Claim as _Claim, declare

    # smoke models are untrained toys: a verdict there would mean nothing
    Claim = partial(_Claim, profiles=("cpu", "paper"))
    return declare(METRIC_KEYS, [
        Claim("bypass", "After answer-masked NPO the parser-split gap (thk leak - out acc) is positive with a CI "
              "excluding 0", "Sec. 4.1", _claim_bypass),
        Claim("suppressed", "NPO lowers out acc to about 0.6 of its K = 0 value while the thinking trace "
              "keeps emitting the canary (thk leak >= 0.8 of K = 0)", "Sec. 4.1", _claim_suppressed),
        Claim("gap_grows", "The gap grows from about zero at the smallest K to its value at the audited K",
              "Sec. 4.1, App. B", _claim_grows),
        Claim("prefill_moves", "At fixed weights, replacing the thinking trace by a non-canary BIO prefill "
              "lowers out acc (Delta_AB = AUTO - BIO > 0, CI excluding 0)", "Sec. 4.2", _claim_prefill),
        Claim("seed_sensitive", "The prefill effect is seed-sensitive: Delta_AB's direction differs between "
              "seeds (both intervals exclude 0, on opposite sides)", "Sec. 4.2, App. F",
              _claim_seed_sensitive),
        Claim("teacher_forced", f"Teacher-forced top-1 on the canary continuation stays >= {TF_FLOOR} under "
              "every prefill", "App. I", _claim_tf),
        Claim("parser_flip", "With the closing tag missing, the two parser conventions give gaps of opposite sign "
              "on the same outputs (true by construction once the tag is banned at decode)", "Sec. 4.4",
              _claim_flip, sanity=True),
        Claim("template_confined", "The bypass gap is confined to the BIO template (META and NONE give gap <= 0)",
              "App. A", _claim_templates),
        Claim("ga_collapse", "Gradient Ascent drives both out acc and thk leak to 0", "App. D", _claim_ga),
        Claim("retain_drop", "NPO costs retain accuracy on generic probes by the largest K", "App. G", _claim_retain),
        Claim("seed1_gap", "On a second seed the audited gap is again positive with a CI excluding 0",
              "App. F", _claim_seed1),
    ])
