"""Benchmark: chapter 3's greedy decoder against ``transformers`` ``generate``, and thread counts.

The audit decodes every probe greedily many times (each K, each prefill arm),
so decoding dominates the chapter's evaluation time. In one process this script
builds the small Qwen2 of a profile (random weights: speed does not depend on
them), decodes the same left-padded batch of prompts with

1. ``memlab.science.canaries.greedy_generate`` (a plain KV-cached loop), and
2. ``model.generate(do_sample=False)``,

checks that both return the same tokens, and prints their wall times and ratio,
once per requested torch thread count. Then it times the LoRA memorisation step
(``memlab.models.lm.train_lm`` on a rank ``lora_rank`` adapter, the profile's batch size,
sequences of the audit's length), in rounds that alternate the thread counts, so
a change of load hits them alike; it reports each count's median step time and
its ratio to the first.

    python benchmarks/bench_canaries.py [--profile cpu] [--batch 120] [--new 120] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.core import config  # noqa: E402
from memlab.models import lm  # noqa: E402
from memlab.models import qwen_small as Q  # noqa: E402
from memlab.science import canaries  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu", choices=config.PROFILES)
    ap.add_argument("--batch", type=int, default=120, help="prompts decoded together")
    ap.add_argument("--new", type=int, default=120, help="new tokens per prompt (no early end)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lora-steps", type=int, default=20, help="LoRA steps per round and thread count")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the LoRA timing")
    args = ap.parse_args()
    start = time.perf_counter()

    cfg = config.resolve("03_canary_audit", args.profile, model="small", drift_model="suppress")
    qcfg = Q.small_config(cfg.vocab_size, hidden=cfg.hidden, layers=cfg.layers, heads=max(2, cfg.hidden // 32),
                          kv_heads=max(1, cfg.hidden // 64), max_len=512, pad_id=0, eos_id=1)
    torch.manual_seed(0)
    model = Q.build_small(qcfg).eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, cfg.vocab_size, (int(n),), generator=g).tolist()
               for n in torch.randint(10, 40, (args.batch,), generator=g)]
    end = -1  # never emitted, so both decoders run the full length

    print(f"profile {args.profile}: hidden {cfg.hidden}, layers {cfg.layers}, vocab {cfg.vocab_size}; "
          f"{args.batch} prompts x {args.new} new tokens")
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        ours = canaries.greedy_generate(model, prompts, args.new, pad_id=0, end_id=end, batch_size=args.batch)
        t_ours = time.perf_counter() - t0
        ids, mask = canaries._left_pad(prompts, 0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        t_hf = time.perf_counter() - t0
        same = out[:, ids.shape[1]:].tolist() == ours
        print(f"threads {threads}: greedy_generate {t_ours:.2f} s, generate {t_hf:.2f} s, "
              f"ratio generate/ours {t_hf / t_ours:.2f}, identical tokens: {same}")
        rows.append({"threads": threads, "greedy_generate_s": t_ours, "hf_generate_s": t_hf,
                     "ratio_hf_over_ours": t_hf / t_ours, "identical_tokens": same})
    lora = lora_step_times(model, cfg, args.threads, args.lora_steps, args.rounds)
    record("canaries", {"config": vars(args), "rows": rows, "lora_step": lora}, time.perf_counter() - start)


def lora_step_times(model, cfg, threads: list[int], steps: int, rounds: int) -> list[dict]:
    """Median seconds per LoRA training step at each thread count, the counts alternating per round."""
    import statistics

    g = torch.Generator().manual_seed(2)
    examples = []
    for _ in range(64):
        n = int(torch.randint(60, 120, (1,), generator=g))
        ids = torch.randint(2, cfg.vocab_size, (n,), generator=g).tolist()
        examples.append((ids, [False] * (n // 2) + [True] * (n - n // 2)))  # loss on the answer half
    peft_model = lm.attach_lora(model, cfg.lora_rank)
    times: dict[int, list[float]] = {t: [] for t in threads}
    for r in range(rounds):
        for t in threads:
            torch.set_num_threads(t)
            t0 = time.perf_counter()
            lm.train_lm(peft_model, examples, steps=steps, batch_size=cfg.batch_size, lr=1e-3, pad_id=0,
                        seed=r, desc=f"LoRA, {t} thread(s)")
            times[t].append((time.perf_counter() - t0) / steps)
    lm.unload_lora(peft_model)
    base = statistics.median(times[threads[0]])
    out = []
    for t in threads:
        med = statistics.median(times[t])
        print(f"LoRA step at {t} thread(s): {med * 1000:.0f} ms (median of {rounds} rounds of {steps}), "
              f"ratio to {threads[0]} thread(s) {base / med:.2f}x")
        out.append({"threads": t, "step_s": med, "speedup_vs_first": base / med})
    return out


if __name__ == "__main__":
    main()
