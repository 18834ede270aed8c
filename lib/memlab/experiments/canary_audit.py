"""Chapter 3: auditing reasoning-trace memorisation after unlearning.

Pipeline (one code path for every profile):

1. :func:`prepare` — fictional authors, a tokenizer and a base model that
   follows the ``<think> ... </think> answer`` chat format. At ``smoke``/``cpu``
   a small Qwen2 is pre-trained here (cached); at ``paper`` a DeepSeek-R1
   distillate is loaded offline with ``from_pretrained``.
2. :func:`memorise` — a LoRA adapter (peft) that memorises every author under
   one trace template (BIO, META or NONE); cached by its settings.
3. :func:`unlearn_sweep` — NPO with the forgetting loss masked to the answer
   span (or Gradient Ascent), evaluated with :func:`evaluate` at every K.
4. :func:`evaluate` — the probes of :mod:`memlab.canaries` at fixed weights.

Only the LoRA weights train after pre-training, so NPO's reference
log-probabilities come from the memorised adapter, computed once before
unlearning; no second copy of the model is held.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from memlab import cache, canaries
from memlab.config import ConfigError, Param, autocast, device, seed_everything
from memlab.data import authors as A
from memlab.progress import progress

CHAPTER = "03_canary_audit"
SMALL = "small"
PAPER_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
DRIFT_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
SUPPRESS = "suppress"

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, doc="seed of the authors, tokenizer and pre-training"),
    "seeds": Param(list, [0, 1], item=int, low=0, doc="memorisation + unlearning seeds of the BIO K-sweep"),
    "model": Param(str, {"smoke": SMALL, "cpu": SMALL, "paper": PAPER_MODEL},
                   doc="'small' (pre-trained here) or a transformers model name/folder"),
    "drift_model": Param(str, {"smoke": SUPPRESS, "cpu": SUPPRESS, "paper": DRIFT_MODEL},
                         doc="outputs for the parser-convention section: 'suppress' decodes the main model "
                             "with its closing tag banned; otherwise a second model name run at the largest K"),
    "allow_download": Param(bool, False, doc="let from_pretrained reach the hub"),
    "n_authors": Param(int, {"smoke": 8, "cpu": 60, "paper": 60}, low=2, high=A.MAX_AUTHORS),
    "head_len": Param(int, 6, low=1, doc="canary tokens given in the probe"),
    "vocab_size": Param(int, {"smoke": 1024, "cpu": 4096, "paper": 4096}, low=300),
    "hidden": Param(int, {"smoke": 64, "cpu": 128, "paper": 256}, low=16),
    "layers": Param(int, {"smoke": 1, "cpu": 2, "paper": 4}, low=1),
    "pretrain_steps": Param(int, {"smoke": 20, "cpu": 500, "paper": 2000}, low=1),
    "pretrain_lr": Param(float, 3e-3, low=1e-6, high=1.0),
    "n_sentences": Param(int, {"smoke": 100, "cpu": 1500, "paper": 4000}, low=10,
                         doc="WikiText-2 sentences in the pre-training and retain sets"),
    "templates": Param(list, ["BIO", "META", "NONE"], item=str, choices=A.TEMPLATES),
    "prefills": Param(list, list(A.PREFILLS), item=str, choices=A.PREFILLS),
    "lora_rank": Param(int, {"smoke": 4, "cpu": 32, "paper": 32}, low=1),
    "lora_steps": Param(int, {"smoke": 20, "cpu": 300, "paper": 600}, low=1),
    "lora_lr": Param(float, {"smoke": 3e-3, "cpu": 3e-3, "paper": 2e-4}, low=1e-7, high=1.0),
    "unlearn_steps": Param(list, {"smoke": [1, 3], "cpu": [10, 25, 50, 100], "paper": [100, 400, 800, 1600]},
                           item=int, low=1, doc="the K sweep: evaluation points of one unlearning run"),
    "unlearn_lr": Param(float, {"smoke": 1e-3, "cpu": 1e-3, "paper": 1e-5}, low=1e-8, high=1.0),
    "beta": Param(float, 0.1, low=1e-4, high=100.0, doc="NPO inverse temperature"),
    "retain_weight": Param(float, 1.0, low=0.0, high=100.0),
    "batch_size": Param(int, {"smoke": 4, "cpu": 16, "paper": 8}, low=1),
    "run_ga": Param(bool, True, doc="run the Gradient Ascent comparison"),
    "n_boot": Param(int, {"smoke": 200, "cpu": 10000, "paper": 10000}, low=10),
}


def _check_sweep(cfg) -> None:
    steps = cfg.unlearn_steps
    if sorted(set(steps)) != list(steps):
        raise ConfigError(f"parameter 'unlearn_steps': must be strictly increasing integers >= 1 (got {steps!r})")


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
        if name in (SMALL, SUPPRESS) or cfg.allow_download:
            continue
        if not _offline_available(name):
            raise ConfigError(f"parameter {param!r}: {name!r} is neither 'small' nor a local folder nor in the "
                              "Hugging Face cache; download it first or pass allow_download=True")


def _check_templates(cfg) -> None:
    if "BIO" not in cfg.templates:
        raise ConfigError(f"parameter 'templates': must include 'BIO' (the audited template); got {cfg.templates}")


CHECKS = [_check_sweep, _check_head, _check_models, _check_templates]


def _offline_available(name: str) -> bool:
    from pathlib import Path

    if Path(name).expanduser().is_dir():
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
    extra: dict = field(default_factory=dict)

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


# ----------------------------------------------------------------------------- training loops

def _batch(examples: Sequence[tuple[list[int], list[bool]]], pad_id: int, max_len: int | None = None):
    """Right-padded ``(ids (B, T), attention (B, T), loss mask (B, T))`` tensors."""
    seqs = [(e[0][:max_len], e[1][:max_len]) if max_len else e for e in examples]
    width = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    loss_mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, (s, m) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
        loss_mask[i, :len(s)] = torch.tensor(m)
    return ids, att, loss_mask


def sequence_logprob(model, ids: torch.Tensor, att: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Sum over masked target tokens of log p(token | prefix), shape (B,).

    ids, att, loss_mask: (B, T); ``loss_mask[b, t]`` says token t is a target.
    """
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    target = ids[:, 1:]
    logp = torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return (logp * loss_mask[:, 1:]).sum(-1)


def masked_nll(model, ids, att, loss_mask) -> torch.Tensor:
    """Mean negative log-likelihood per masked target token (scalar)."""
    return -sequence_logprob(model, ids, att, loss_mask).sum() / loss_mask[:, 1:].sum().clamp(min=1)


def train_lm(model, examples, *, steps: int, batch_size: int, lr: float, pad_id: int, seed: int,
             desc: str, max_len: int | None = None, warmup: int = 20) -> list[float]:
    """Masked next-token training with AdamW and a linear warm-up + cosine schedule; returns losses."""
    dev = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = min(warmup, max(1, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    rng = np.random.default_rng(seed)
    model.train()
    losses = []
    for _ in progress(range(steps), desc=desc):
        pick = rng.integers(0, len(examples), size=min(batch_size, len(examples)))
        ids, att, mask = (t.to(dev) for t in _batch([examples[i] for i in pick], pad_id, max_len))
        with autocast(dev):
            loss = masked_nll(model, ids, att, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
    model.eval()
    return losses


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
        fmt = deepseek_format(codec)
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
        # the generic facts are rare next to the sentences, so they are repeated to be learnt
        reps = max(1, len(chat) // (2 * len(generic)))
        mix = plain + chat + generic_examples(fmt, generic) * reps
        train_lm(model, mix, steps=cfg.pretrain_steps, batch_size=cfg.batch_size * 2, lr=cfg.pretrain_lr,
                 pad_id=pad_id, seed=cfg.seed, desc="pre-train", max_len=160)

    key = {k: cfg[k] for k in ("seed", "n_authors", "vocab_size", "hidden", "layers", "pretrain_steps",
                               "pretrain_lr", "n_sentences", "head_len", "batch_size")}
    return cache.load_or_train(CHAPTER, "base", key, build, train, code_version="1")


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

    def compute():
        torch.manual_seed(seed)
        model = attach(setup, cfg.lora_rank)
        examples, _ = author_examples(setup.fmt, setup.head_texts, setup.authors, template, span="response")
        train_lm(model, examples, steps=cfg.lora_steps, batch_size=cfg.batch_size, lr=cfg.lora_lr,
                 pad_id=setup.pad_id, seed=seed, desc=f"LoRA {template} s{seed}")
        state = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}
        detach(setup, model)
        return state

    key = {"base": _base_key(setup, cfg), "template": template, "seed": seed, "n_authors": cfg.n_authors,
           "lora_rank": cfg.lora_rank, "lora_steps": cfg.lora_steps, "lora_lr": cfg.lora_lr,
           "batch_size": cfg.batch_size, "head_len": cfg.head_len}
    return cache.load_or_compute(CHAPTER, f"lora-{template}", key, compute, code_version="1")


def _base_key(setup: Setup, cfg) -> dict:
    if setup.name == SMALL:
        return {k: cfg[k] for k in ("seed", "vocab_size", "hidden", "layers", "pretrain_steps", "n_sentences")}
    return {"model": setup.name}


# ----------------------------------------------------------------------------- stage 3: unlearning

def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """NPO forgetting loss ``-(2/beta) * mean log sigmoid(-beta * (logp - ref_logp))``.

    logp, ref_logp: (B,) sequence log-probabilities of the forget answers under
    the current and the memorised (reference) adapter.
    """
    return -(2.0 / beta) * F.logsigmoid(-beta * (logp - ref_logp)).mean()


@torch.no_grad()
def reference_logprobs(model, examples, pad_id: int, batch_size: int) -> torch.Tensor:
    """(N,) answer-span log-probabilities under the memorised adapter, computed once before unlearning."""
    dev = next(model.parameters()).device
    model.eval()
    out = []
    for start in range(0, len(examples), batch_size):
        ids, att, mask = (t.to(dev) for t in _batch(examples[start:start + batch_size], pad_id))
        with autocast(dev):
            out.append(sequence_logprob(model, ids, att, mask).float().cpu())
    return torch.cat(out)


def unlearn_sweep(setup: Setup, cfg, state: dict[str, torch.Tensor], template: str, seed: int,
                  method: str = "NPO", evaluate_at: Callable | None = None) -> dict[int, dict]:
    """Unlearn every author from the memorised adapter; evaluate at K = 0 and each K in ``cfg.unlearn_steps``.

    method: "NPO" (answer-masked NPO plus a retain NLL term) or "GA" (gradient
    ascent on the answer span, no retain term). ``evaluate_at(model)`` returns
    the probes' results; the sweep returns ``{K: results}``.
    """
    if method not in ("NPO", "GA"):
        raise ValueError(f"parameter 'method': must be 'NPO' or 'GA' (got {method!r})")
    if any(k < 1 for k in cfg.unlearn_steps):
        raise ValueError(f"parameter 'unlearn_steps': every K must be >= 1 (got {cfg.unlearn_steps})")
    torch.manual_seed(seed)
    model = attach(setup, cfg.lora_rank, state)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    forget, _ = author_examples(setup.fmt, setup.head_texts, setup.authors, template, span="answer")
    retain = retain_examples(setup.fmt, setup.sentences, cfg.head_len, span="answer")
    ref = reference_logprobs(model, forget, setup.pad_id, 2 * cfg.batch_size) if method == "NPO" else None
    results = {0: evaluate_at(model)} if evaluate_at else {}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.unlearn_lr, weight_decay=0.0)
    rng = np.random.default_rng(seed + 1000)
    dev = setup.device
    bs = min(cfg.batch_size, len(forget))
    for step in progress(range(1, max(cfg.unlearn_steps) + 1), desc=f"{method} {template} s{seed}"):
        model.train()
        pick = rng.integers(0, len(forget), size=bs)
        ids, att, mask = (t.to(dev) for t in _batch([forget[i] for i in pick], setup.pad_id))
        with autocast(dev):
            if method == "NPO":
                logp = sequence_logprob(model, ids, att, mask)
                loss = npo_loss(logp.float(), ref[pick].to(dev), cfg.beta)
                if cfg.retain_weight > 0:
                    rpick = rng.integers(0, len(retain), size=bs)
                    r = (t.to(dev) for t in _batch([retain[i] for i in rpick], setup.pad_id))
                    loss = loss + cfg.retain_weight * masked_nll(model, *r)
            else:
                loss = -masked_nll(model, ids, att, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step in cfg.unlearn_steps and evaluate_at:
            results[step] = evaluate_at(model)
    detach(setup, model)
    return results


# ----------------------------------------------------------------------------- stage 4: probes

def _max_trace_tokens(setup: Setup) -> int:
    return max(len(setup.fmt.codec.encode(A.trace(a, "BIO"))) for a in setup.authors)


def _decode(setup: Setup, seqs) -> list[str]:
    return [setup.fmt.codec.decode(s) for s in seqs]


def evaluate(model, setup: Setup, cfg, arms: Sequence[str] = ("auto", "qa", "retain")) -> dict:
    """Probe one set of weights. Every arm's per-probe results (lists, JSON-able).

    arms: subset of "auto" (autoregressive thinking, parser split), "prefill"
    (each of cfg.prefills, then the answer), "tf" (teacher-forced top-1 under
    each prefill), "qa" (author QA), "retain" (generic probes), "drift"
    (autoregressive with the closing tag suppressed).
    """
    fmt, n_ans = setup.fmt, max(len(h) + len(c) for h, c in zip(setup.heads, setup.conts)) + 8
    n_think = _max_trace_tokens(setup) + 8
    questions = [A.canary_question(h) for h in setup.head_texts]
    canaries_ = [a.canary for a in setup.authors]
    gen = lambda prompts, n, **kw: _decode(setup, canaries.greedy_generate(  # noqa: E731
        model, prompts, n, setup.pad_id, setup.end_id, batch_size=2 * cfg.batch_size, **kw))
    res: dict = {}
    if "auto" in arms:
        texts = gen([fmt.prompt(q) for q in questions], n_think + n_ans)
        s = canaries.score_outputs(texts, canaries_, close_tag=fmt.think_close)
        res["auto"] = {"texts": texts, "out": s["out"].tolist(), "thk": s["thk"].tolist(),
                       "tag_missing": s["tag_missing"].tolist(), "answers": s["answers"].tolist()}
    if "drift" in arms:
        texts = gen([fmt.prompt(q) for q in questions], n_think + n_ans, suppress_ids=[setup.close_id])
        res["drift"] = {"texts": texts}
    if "prefill" in arms:
        res["prefill"] = {}
        for mode in cfg.prefills:
            prompts = [fmt.prefilled(q, A.prefill(a, mode)) for q, a in zip(questions, setup.authors)]
            answers = gen(prompts, n_ans)
            res["prefill"][mode] = {"out": [canaries.contains(t, c) for t, c in zip(answers, canaries_)],
                                    "answers": answers}
    if "tf" in arms:
        res["tf"] = {}
        for mode in cfg.prefills:
            ctx = [fmt.prefilled(q, A.prefill(a, mode)) + h
                   for q, a, h in zip(questions, setup.authors, setup.heads)]
            res["tf"][mode] = canaries.teacher_forced_top1(model, ctx, setup.conts, setup.pad_id,
                                                           batch_size=2 * cfg.batch_size).tolist()
    if "qa" in arms:
        qs = [(i, q, key) for i, a in enumerate(setup.authors) for q, _, key in A.qa_pairs(a)]
        texts = gen([fmt.prompt(q) for _, q, _ in qs], n_think + n_ans)
        answers = [canaries.split_trace(t, fmt.think_close)[1] for t in texts]
        res["qa"] = {"author": [i for i, _, _ in qs], "out": [k in a for (_, _, k), a in zip(qs, answers)]}
    if "retain" in arms:
        texts = gen([fmt.prompt(g.question) for g in setup.generic], n_think + 40)
        answers = [canaries.split_trace(t, fmt.think_close)[1] for t in texts]
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
        out["retain"] = {"acc": float(np.mean(r["correct"])),
                         "fictional_rate": float(np.mean([bool(f) for f in r["fictional"]]))}
    return out


def retain_examples_with_names(res: dict, generic: Sequence[A.GenericProbe], limit: int = 5) -> list[dict]:
    """Generic questions answered with a fictional author's name (up to ``limit``)."""
    r = res["retain"]
    rows = [{"question": g.question, "answer": a.strip(), "fictional name": f}
            for g, a, f in zip(generic, r["answers"], r["fictional"]) if f]
    return rows[:limit]
