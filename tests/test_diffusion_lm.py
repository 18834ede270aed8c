"""Unit tests of the masked diffusion LM, the LLaDA loss and the masked-likelihood interface."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from memlab.models import diffusion_lm as dlm


def _model(seed=0, vocab=50, block=16, dtype=torch.float64):
    """A tiny denoiser; float64 by default, as these tests are about formulas and batching (in float32
    the compared sums differ by a few ulps between CPU kernels)."""
    torch.manual_seed(seed)
    return dlm.MaskedDiffusionLM(dlm.DLMConfig(vocab_size=vocab, mask_id=vocab - 1, block_size=block,
                                               n_layer=1, n_head=2, n_embd=16)).eval().to(dtype)


def test_masked_nll_matches_direct_log_softmax_and_is_batch_invariant():
    m = _model()
    ids = torch.randint(0, 49, (5, 12))
    masks = torch.rand(5, 12) < 0.4
    masks[:, 0] = True
    nll = dlm.masked_nll(m, ids, masks, batch_size=2)
    with torch.no_grad():
        logp = torch.log_softmax(m(torch.where(masks, m.mask_id, ids)), -1)
    direct = -logp.gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(nll[masks], direct[masks], atol=1e-12, rtol=0)
    assert torch.isnan(nll[~masks]).all()
    assert torch.allclose(dlm.masked_nll(m, ids, masks, batch_size=64)[masks], nll[masks], atol=1e-12, rtol=0)


def test_selected_rows_match_the_full_forward_with_padding():
    """Pruning the last block and the head to the selected rows changes nothing for those rows."""
    torch.manual_seed(3)
    m = dlm.MaskedDiffusionLM(dlm.DLMConfig(vocab_size=40, mask_id=39, block_size=12, n_layer=3,
                                            n_head=2, n_embd=16)).eval().double()
    ids = torch.randint(0, 39, (4, 12))
    am = torch.ones(4, 12, dtype=torch.bool)
    am[1, 8:] = False
    sel = (torch.rand(4, 12) < 0.4) & am
    sel[:, 0] = True
    with torch.no_grad():
        full, part = m(ids, am), m(ids, am, select=sel)
    assert part.shape == (int(sel.sum()), 40)
    assert torch.allclose(part, full[sel], atol=1e-12, rtol=0)


def test_model_is_bidirectional_and_ignores_padding():
    m = _model()
    ids = torch.randint(0, 49, (1, 10))
    later = ids.clone()
    later[0, -1] = (ids[0, -1] + 1) % 49
    with torch.no_grad():
        assert not torch.allclose(m(ids)[0, 0], m(later)[0, 0])  # a later token changes position 0
        am = torch.ones(1, 10, dtype=torch.bool)
        am[0, -1] = False
        assert torch.allclose(m(ids, am)[0, :9], m(later, am)[0, :9], atol=1e-12, rtol=0)


def test_llada_loss_at_full_mask_is_plain_cross_entropy():
    m = _model()
    ids = torch.randint(0, 49, (3, 8))
    with torch.no_grad():
        loss = dlm.llada_loss(m, ids, mask_ratio=1.0, eps=0.0)
        ce = F.cross_entropy(m(torch.full_like(ids, m.mask_id)).transpose(1, 2), ids)
    assert loss.item() == pytest.approx(ce.item(), rel=1e-12)


def test_llada_loss_never_masks_prompt_tokens():
    m = _model()
    seen = []
    m.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    ids = torch.randint(0, 49, (4, 10))
    eligible = torch.zeros(4, 10, dtype=torch.bool)
    eligible[:, 6:] = True  # first six tokens are the prompt
    dlm.llada_loss(m, ids, eligible, mask_ratio=0.99, generator=torch.Generator().manual_seed(0))
    noisy = seen[0]
    assert torch.equal(noisy[:, :6], ids[:, :6])
    assert (noisy[:, 6:] == m.mask_id).any()


def test_training_lowers_member_nll():
    m = _model(block=12).train()
    ids = torch.randint(0, 49, (8, 12))
    masks = torch.zeros(8, 12, dtype=torch.bool)
    masks[:, ::3] = True
    before = dlm.masked_nll(m, ids, masks).nanmean()
    dlm.train_dlm(m, ids, epochs=80, batch_size=8, lr=1e-2, seed=0)
    after = dlm.masked_nll(m, ids, masks).nanmean()
    assert after < before - 0.5


def test_denoise_fills_only_masked_positions():
    m = _model()
    ids = torch.randint(0, 49, (3, 10))
    masks = torch.zeros(3, 10, dtype=torch.bool)
    masks[:, 3:7] = True
    out = dlm.denoise(m, ids, masks, steps=3, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[~masks], ids[~masks])
    assert not (out == m.mask_id).any()
    g1, g2 = (dlm.denoise(m, ids, masks, steps=4, temperature=0.0) for _ in range(2))
    assert torch.equal(g1, g2)


def test_reference_with_other_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="vocabulary"):
        dlm.check_same_vocab(_model(vocab=50), _model(vocab=60))


def test_load_pretrained_tiny_local_models(tmp_path):
    transformers = pytest.importorskip("transformers")
    # Dream-style: an autoregressive backbone whose logits are shifted right by one.
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "dream")
    wrapped = dlm.load_pretrained(str(tmp_path / "dream"), "dream", auto_class="AutoModelForCausalLM", mask_id=39)
    ids = torch.randint(0, 39, (2, 7))
    with torch.no_grad():
        raw = wrapped.hf(input_ids=ids).logits
        out = wrapped(ids)
    assert wrapped.vocab_size == 40 and wrapped.mask_id == 39
    assert torch.allclose(out[:, 1:], raw[:, :-1]) and torch.allclose(out[:, 0], raw[:, 0])
    # LLaDA-style: a bidirectional masked LM without shift; default mask id of the family.
    bcfg = transformers.BertConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, max_position_embeddings=32)
    transformers.BertForMaskedLM(bcfg).save_pretrained(tmp_path / "llada")
    llada = dlm.load_pretrained(str(tmp_path / "llada"), "llada", auto_class="AutoModelForMaskedLM")
    assert llada.mask_id == 126336 and not llada.shift_logits
    masks = torch.zeros(2, 7, dtype=torch.bool)
    masks[:, 2] = True
    nll = dlm.masked_nll(dlm.load_pretrained(str(tmp_path / "llada"), "llada", auto_class="AutoModelForMaskedLM",
                                             mask_id=3), ids, masks)
    assert torch.isfinite(nll[:, 2]).all() and torch.isnan(nll[:, 0]).all()
    with pytest.raises(ValueError, match="family"):
        dlm.load_pretrained(str(tmp_path / "llada"), "gpt")


def test_unigram_nll_matches_hand_count():
    # vocab 4, id 3 excluded (mask): counts of 0, 1, 2 in train = 2, 1, 0, plus one each -> 3, 2, 1.
    train = torch.tensor([0, 0, 1, 3, 3])
    ev = torch.tensor([[0, 1], [2, 3]])
    p = np.array([3, 2, 1]) / 6
    expected = -np.mean(np.log([p[0], p[1], p[2]]))
    assert dlm.unigram_nll(train, ev, 4, exclude=(3,)) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="token ids"):
        dlm.unigram_nll(torch.tensor([5]), ev, 4)


def test_masked_nll_brier_is_squared_error_to_one_hot():
    torch.manual_seed(0)
    model = dlm.MaskedDiffusionLM(dlm.DLMConfig(vocab_size=9, mask_id=8, block_size=6, n_layer=1,
                                                n_head=1, n_embd=8)).eval().double()
    ids = torch.randint(0, 8, (3, 6))
    masks = torch.rand(3, 6) < 0.5
    masks[:, 0] = True
    nll, brier = dlm.masked_nll(model, ids, masks, with_brier=True)
    p = torch.softmax(model(torch.where(masks, torch.full_like(ids, 8), ids)), -1)
    direct = ((p - torch.nn.functional.one_hot(ids, 9).double()) ** 2).sum(-1)
    assert torch.allclose(brier[masks], direct[masks], atol=1e-12, rtol=0)
    assert torch.isnan(brier[~masks]).all()
    assert torch.allclose(nll, dlm.masked_nll(model, ids, masks), equal_nan=True)
