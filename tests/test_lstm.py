"""Long-short term masking transformer (Zhang et al. 2020): the attention's three forms against each
other, the model against the baseline, incremental decoding and beam search against full
forward passes, and the masks' locality checked through gradients."""

import argparse
import os
import shlex
import subprocess

import pytest
import torch
from conftest import (
    assert_fp32_close,
    build_model,
    low_precision_tolerance,
    max_difference,
    probe_like,
    transformer_terms,
)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

import rfa_doc_mt  # noqa: F401  (registers the task and the baseline)
from rfa_doc_mt.models.doc_transformer import (
    doc_transformer,
)
from rfa_doc_mt.models.long_short_transformer import (
    LongShortTermMaskingTransformerModel,
    long_short_doc_transformer,
)
from rfa_doc_mt.modules.long_short_attention import (
    LongShortMultiheadAttention,
    aligned_source_sentence,
    long_short_attention_reference,
)
from rfa_doc_mt.modules.sentences import sentence_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DICTIONARY = Dictionary()
WORDS = [DICTIONARY.add_symbol(word) for word in "abcdefgh"]
SEP = DICTIONARY.add_symbol("<sep>")
PAD, EOS = DICTIONARY.pad(), DICTIONARY.eos()


class Task:
    """The parts of the doc_translation task that build_model reads."""
    source_dictionary = target_dictionary = DICTIONARY
    source_separator = target_separator = SEP


def join(sentences):
    """Sentences (lists of word indices into WORDS) -> one window of token ids, no EOS."""
    tokens = []
    for number, sentence in enumerate(sentences):
        if number:
            tokens.append(SEP)
        tokens += [WORDS[word] for word in sentence]
    return tokens


def pad_rows(rows):
    width = max(len(row) for row in rows)
    return torch.tensor([row + [PAD] * (width - len(row)) for row in rows])


# three windows: 3/1/2 source sentences, 3/3/2 target sentences (row 1 has more target than
# source sentences: aligned cross attention clamps), separators at different positions
SOURCE = [[[0, 1, 2], [3, 4], [5, 6, 7, 0]], [[1, 1]], [[2, 3, 4, 5], [6]]]
TARGET = [[[0, 1], [2, 3, 4], [5]], [[3], [4, 5], [6, 7]], [[1, 2, 3], [4, 5]]]


def make_batch(source=SOURCE, target=TARGET):
    """src_tokens [batch, src_len] (window + EOS), their lengths, prev_output_tokens
    [batch, tgt_len] (EOS + window), all right-padded as the task collates them."""
    src_tokens = pad_rows([join(window) + [EOS] for window in source])
    prev_output_tokens = pad_rows([[EOS] + join(window) for window in target])
    return src_tokens, src_tokens.ne(PAD).sum(1), prev_output_tokens


def build(architecture, *model_args, seed=1):
    return build_model(architecture, Task(), *model_args, seed=seed)


def build_lstm(*model_args, seed=1):
    return build("long_short_doc_transformer_tiny", *model_args, seed=seed)


# ---- the attention module -------------------------------------------------------------------


def attention_inputs(causal):
    """Hidden states [time, batch, 16], padding mask, sentence ids, causal mask for decoder
    inputs; the last row ends with a separator, so its padding forms an empty sentence."""
    tokens = make_batch(target=TARGET + [[[6], []]])[2]
    torch.manual_seed(0)
    x = torch.randn(tokens.size(1), tokens.size(0), 16, requires_grad=True)
    padding = tokens.eq(PAD)
    ids = sentence_ids(tokens, SEP)
    length = tokens.size(1)
    attn_mask = torch.triu(torch.full((length, length), float("-inf")), 1) if causal else None
    return x, padding, ids, attn_mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("local_heads", [0, 1, 4])
def test_training_form_matches_reference(causal, local_heads):
    torch.manual_seed(0)
    attention = LongShortMultiheadAttention(16, 4, local_heads=local_heads, self_attention=True)
    x, padding, ids, attn_mask = attention_inputs(causal)
    attention.hand_in(query_sentence_ids=ids, key_sentence_ids=ids)
    fast, _ = attention(x, x, x, key_padding_mask=padding, attn_mask=attn_mask, need_weights=False)
    explicit, head_weights = attention(x, x, x, key_padding_mask=padding, attn_mask=attn_mask,
                                       need_head_weights=True)

    def split(projection):  # [time, batch, embed] -> [batch, heads, time, dim]
        return projection(x).view(x.size(0), x.size(1), 4, 4).permute(1, 2, 0, 3)

    output, probabilities = long_short_attention_reference(
        split(attention.q_proj), split(attention.k_proj), split(attention.v_proj), local_heads,
        ids, ids, key_padding_mask=padding, causal=causal)
    reference = attention.out_proj(output.permute(2, 0, 1, 3).reshape(x.shape))
    # q, k, v projections (16), scores over the head dim (4), softmax and weighted sum over the
    # keys (2 x time), output projection (16)
    terms = 2 * 16 + 4 + 2 * x.size(0)
    assert_fp32_close(fast, reference, terms, name=f"fast vs reference (causal={causal}, local={local_heads})")
    assert_fp32_close(explicit, reference, terms, name="explicit weights vs reference")
    assert_fp32_close(head_weights.transpose(0, 1), probabilities, 4 + 2 * x.size(0), name="attention weights")
    assert torch.isfinite(fast).all()

    # the backward pass runs each sum again, transposed: twice the terms
    gradients = [torch.autograd.grad(out.pow(2).sum(), x)[0] for out in (fast, explicit, reference)]
    assert_fp32_close(gradients[0], gradients[2], 2 * terms, name="gradient fast vs reference")
    assert_fp32_close(gradients[1], gradients[2], 2 * terms, name="gradient explicit vs reference")


def keep_heads_apart(attention):
    """Make out_proj the identity, so that output channels [h * dim, (h + 1) * dim) are head h's."""
    attention.out_proj.weight.data.copy_(torch.eye(attention.embed_dim))
    attention.out_proj.bias.data.zero_()


def depends_on(output, inputs, row, position, head, head_dim):
    """[time_k] bool: the positions of ``inputs`` ([time_k, batch, embed]) in ``row`` that
    head ``head``'s output at ``position`` depends on (nonzero gradient of a random projection
    of it: see conftest.probe_like)."""
    head_output = output[position, row, head * head_dim:(head + 1) * head_dim]
    gradient, = torch.autograd.grad((head_output * probe_like(head_output)).sum(), inputs, retain_graph=True)
    return gradient[:, row].abs().sum(-1).gt(0)


@pytest.mark.parametrize("causal", [False, True])
def test_local_head_output_does_not_depend_on_other_sentences(causal):
    torch.manual_seed(0)
    attention = LongShortMultiheadAttention(16, 4, local_heads=2, self_attention=True)
    keep_heads_apart(attention)
    x, padding, ids, attn_mask = attention_inputs(causal)
    attention.hand_in(query_sentence_ids=ids, key_sentence_ids=ids)
    output, _ = attention(x, x, x, key_padding_mask=padding, attn_mask=attn_mask, need_weights=False)
    row, query = 0, 7  # target row 0: "EOS a b <sep> c d e <sep> f": position 7 closes sentence 1
    assert ids[row].tolist()[:9] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    same_sentence = ids[row].eq(ids[row, query]) & ~padding[row]
    visible = ~padding[row]
    if causal:
        visible &= torch.arange(ids.size(1)) <= query
    for head in range(4):
        depends = depends_on(output, x, row, query, head, attention.head_dim)
        if head < 2:  # local: its own sentence only (all of it that it may see)
            assert depends.tolist() == (same_sentence & visible).tolist()
        else:  # global: every visible token, other sentences included
            assert depends.tolist() == visible.tolist()


def test_aligned_cross_attention_sees_the_aligned_source_sentence():
    torch.manual_seed(0)
    attention = LongShortMultiheadAttention(16, 4, local_heads=2, encoder_decoder_attention=True)
    keep_heads_apart(attention)
    src_tokens, _, prev_output_tokens = make_batch()
    source_ids, target_ids = sentence_ids(src_tokens, SEP), sentence_ids(prev_output_tokens, SEP)
    aligned = aligned_source_sentence(target_ids, source_ids)
    assert aligned[1].max().item() == 0  # row 1: one source sentence, three target sentences
    attention.hand_in(query_sentence_ids=aligned, key_sentence_ids=source_ids)
    x = torch.randn(prev_output_tokens.size(1), 3, 16)
    encoder_out = torch.randn(src_tokens.size(1), 3, 16, requires_grad=True)
    output, _ = attention(x, encoder_out, encoder_out, key_padding_mask=src_tokens.eq(PAD), static_kv=True)
    for row, query in [(0, 5), (0, 8), (1, 7), (2, 2)]:
        for head in range(4):
            depends = depends_on(output, encoder_out, row, query, head, attention.head_dim)
            source_sentence = source_ids[row].eq(min(target_ids[row, query].item(), source_ids[row].max().item()))
            expected = src_tokens[row].ne(PAD) & (source_sentence if head < 2 else True)
            assert depends.tolist() == expected.tolist()


def test_encoder_with_all_heads_local_keeps_sentences_apart():
    model = build_lstm("--local-heads", "4", "--local-attention", "encoder")
    src_tokens, lengths, _ = make_batch()
    embeddings = model.encoder.embed_tokens(src_tokens).detach().requires_grad_()
    encoder_out = model.encoder(src_tokens, lengths, token_embeddings=embeddings)["encoder_out"][0]
    ids = sentence_ids(src_tokens, SEP)
    row, query = 0, 4  # "a b c <sep> d e ...": position 4 is in sentence 1
    # the encoder ends in a LayerNorm, whose output sums to its bias whatever the input: the
    # gradient of a plain sum would be zero everywhere, so project on a random direction
    output = encoder_out[query, row]
    gradient, = torch.autograd.grad((output * probe_like(output)).sum(), embeddings)
    depends = gradient[row].abs().sum(-1).gt(0)
    assert depends.tolist() == (ids[row].eq(ids[row, query]) & src_tokens[row].ne(PAD)).tolist()


# ---- the model ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # fairseq's baseline
def test_zero_local_heads_equals_the_baseline_with_its_weights():
    baseline = build("doc_transformer_tiny", "--dropout", "0", seed=3)
    lstm = build_lstm("--local-heads", "0", "--local-attention", "encoder,decoder,cross", "--dropout", "0")
    assert isinstance(lstm.decoder.layers[0].encoder_attn, LongShortMultiheadAttention)
    lstm.load_state_dict(baseline.state_dict())  # strict: same parameter names and shapes
    src_tokens, lengths, prev_output_tokens = make_batch()
    expected, expected_extra = baseline(src_tokens, lengths, prev_output_tokens)
    actual, actual_extra = lstm(src_tokens, lengths, prev_output_tokens)
    terms = model_terms(src_tokens, prev_output_tokens)
    assert_fp32_close(actual, expected, terms, name="zero local heads vs baseline: logits")
    assert_fp32_close(actual_extra["attn"][0], expected_extra["attn"][0], terms, magnitude=1.0,
                      name="zero local heads vs baseline: attention")
    # training mode (no dropout): same gradients. The backward pass runs each sum again,
    # transposed (twice the terms), and sums over every logit of the batch into each weight
    baseline.train(), lstm.train()
    for model in (baseline, lstm):
        model.zero_grad()
        model(src_tokens, lengths, prev_output_tokens)[0].log_softmax(-1).mean().backward()
    gradients = dict(lstm.named_parameters())
    largest = max(p.grad.abs().max().item() for p in baseline.parameters())
    for name, p in baseline.named_parameters():
        assert_fp32_close(gradients[name].grad, p.grad, 2 * terms + prev_output_tokens.numel(), largest,
                          name=f"gradient of {name}")

    # the same weights with local heads compute something else
    local = build_lstm("--dropout", "0")
    local.load_state_dict(baseline.state_dict())
    baseline.eval()
    assert max_difference(local(src_tokens, lengths, prev_output_tokens)[0], expected) > 1e-2


def model_terms(src_tokens, prev_output_tokens, vocabulary=0):
    """conftest.transformer_terms for the tiny architecture (128 wide, FFN 256, 2 + 2 layers)."""
    return transformer_terms(128, 256, 2, 2, src_tokens.size(1), prev_output_tokens.size(1), vocabulary=vocabulary)


def decode_step_by_step(model, encoder_out, prev_output_tokens, incremental_state=None, start=0):
    """Logits [batch, time - start, vocab] from feeding prev_output_tokens one token at a time."""
    incremental_state = {} if incremental_state is None else incremental_state
    steps = []
    for step in range(start, prev_output_tokens.size(1)):
        logits, _ = model.decoder(prev_output_tokens[:, :step + 1], encoder_out=encoder_out,
                                  incremental_state=incremental_state)
        steps.append(logits[:, -1])
    return torch.stack(steps, dim=1)


LOCAL_EVERYWHERE = ("--local-heads", "2", "--local-attention", "encoder,decoder,cross")


@pytest.mark.parametrize("beam_size", [1, 2])
def test_token_by_token_decoding_equals_full_forward(beam_size):
    model = build_lstm(*LOCAL_EVERYWHERE)
    src_tokens, lengths, prev_output_tokens = make_batch()
    with torch.no_grad():
        full, _ = model(src_tokens, lengths, prev_output_tokens)
        encoder_out = model.encoder(src_tokens, lengths)
        if beam_size > 1:  # as beam search does: beams side by side, one cross-attention key copy
            beams = torch.arange(3).repeat_interleave(beam_size)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, beams)
            prev_output_tokens, full = prev_output_tokens[beams], full[beams]
            model.decoder.set_beam_size(beam_size)
        incremental = decode_step_by_step(model, encoder_out, prev_output_tokens)
    real = prev_output_tokens.ne(PAD)  # padded positions are not decoded
    assert_fp32_close(incremental[real], full[real], model_terms(src_tokens, prev_output_tokens),
                      name=f"token by token vs full (beam {beam_size})")


@pytest.mark.parametrize("new_order", [[2, 0, 1, 4, 5, 3], [1, 1, 0, 5, 5, 5]])
def test_beam_reordering_moves_the_incremental_state(new_order):
    """As in beam search: 2 sentences x 3 beams, beams reordered (and copied) within a sentence.
    (Cross-attention caches hold one copy per sentence: fairseq never moves them across
    sentences, so neither does this test.)"""
    model = build_lstm(*LOCAL_EVERYWHERE)
    sources, targets = [0, 0, 0, 2, 2, 2], [0, 1, 2, 2, 0, 1]
    src_tokens, lengths, prev_output_tokens = make_batch(
        source=[SOURCE[i] for i in sources], target=[TARGET[i] for i in targets])
    # after 5 steps the beams of a sentence have seen their separators at different places
    ids = sentence_ids(prev_output_tokens, SEP)[:, :5]
    assert len({tuple(row) for row in ids[:3].tolist()}) == 3
    new_order = torch.tensor(new_order)
    model.decoder.set_beam_size(3)
    with torch.no_grad():
        expected, _ = model(src_tokens[new_order], lengths[new_order], prev_output_tokens[new_order])
        encoder_out = model.encoder(src_tokens, lengths)
        state = {}
        decode_step_by_step(model, encoder_out, prev_output_tokens[:, :5], state)
        model.decoder.reorder_incremental_state_scripting(state, new_order)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
        continued = decode_step_by_step(model, encoder_out, prev_output_tokens[new_order], state, start=5)
    real = prev_output_tokens[new_order, 5:].ne(PAD)
    assert_fp32_close(continued[real], expected[:, 5:][real], model_terms(src_tokens, prev_output_tokens),
                      name="continued after reorder vs full")


def test_beam_search_scores_equal_full_forward_scores():
    model = build_lstm(*LOCAL_EVERYWHERE, seed=4)
    src_tokens, lengths, _ = make_batch()
    generator = SequenceGenerator([model], DICTIONARY, beam_size=3, max_len_a=0, max_len_b=14)
    # a forced first sentence makes every hypothesis span at least two sentences
    prefix = torch.tensor([[WORDS[0], SEP]] * 3)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": lengths}, "id": torch.arange(3)}
    with torch.no_grad():
        hypotheses = generator.generate([model], sample, prefix_tokens=prefix)
        separators = 0
        for row, beam in enumerate(hypotheses):
            assert len(beam) == 3
            for hypothesis in beam:
                tokens = hypothesis["tokens"]
                separators += tokens.eq(SEP).sum().item()
                prev_output_tokens = torch.cat([tokens.new_tensor([EOS]), tokens[:-1]])[None]
                logits, _ = model(src_tokens[row:row + 1, :lengths[row]], lengths[row:row + 1], prev_output_tokens)
                scores = model.get_normalized_probs((logits, None), log_probs=True)[0]
                scores = scores.gather(-1, tokens[:, None])[:, 0]
                terms = model_terms(src_tokens, prev_output_tokens, vocabulary=len(DICTIONARY))
                assert_fp32_close(hypothesis["positional_scores"], scores, terms, name="beam scores vs full forward")
    assert separators > 9  # beyond the forced ones: the search crossed sentence boundaries itself


def test_padding_rows_are_never_nan():
    model = build_lstm("--local-heads", "4", "--local-attention", "encoder,decoder,cross")
    # row 0 ends its target with a separator: the last (padding) sentence of its decoder input is empty
    src_tokens, lengths, prev_output_tokens = make_batch(
        source=SOURCE, target=[[[0, 1], []], [[3], [4, 5], [6, 7, 1, 2, 3]], [[1]]])
    assert prev_output_tokens[0].tolist()[:5] == [EOS, WORDS[0], WORDS[1], SEP, PAD]
    model.train()
    logits, extra = model(src_tokens, lengths, prev_output_tokens)
    logits.sum().backward()
    assert torch.isfinite(logits).all() and torch.isfinite(extra["attn"][0]).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(src_tokens, lengths, prev_output_tokens)[0]).all()


def test_bfloat16_autocast_stays_close_to_float32():
    model = build_lstm(*LOCAL_EVERYWHERE)
    src_tokens, lengths, prev_output_tokens = make_batch()
    with torch.no_grad():
        expected = model(src_tokens, lengths, prev_output_tokens)[0].log_softmax(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            actual = model(src_tokens, lengths, prev_output_tokens)[0].float().log_softmax(-1)
    real = prev_output_tokens.ne(PAD)
    assert torch.isfinite(actual).all()
    # autocast rounds the input and the weight of each matmul on the path to bf16: 2 x 4 per
    # attention (q, k, v, output projections), 2 x 2 per feed-forward block; encoder layers have
    # one attention, decoder layers two; then the output projection
    roundings = 2 * (2 * (4 + 2) + 2 * (2 * 4 + 2) + 1)
    bound = low_precision_tolerance(roundings, expected[real].abs().max().item())
    print(f"[bf16] autocast vs fp32: {max_difference(actual[real], expected[real]):.3g} (bound {bound:.3g})")
    assert max_difference(actual[real], expected[real]) <= bound


# ---- options, architectures, configs --------------------------------------------------------


def test_architectures_and_options():
    paper, baseline = argparse.Namespace(), argparse.Namespace()
    long_short_doc_transformer(paper)
    doc_transformer(baseline)
    assert {k: v for k, v in vars(paper).items() if not k.startswith("local_")} == vars(baseline)
    model = build("long_short_doc_transformer")
    attention = model.encoder.layers[0].self_attn
    assert (attention.num_heads, attention.local_heads) == (8, 4)  # default: half of the heads
    assert not isinstance(model.decoder.layers[0].encoder_attn, LongShortMultiheadAttention)
    with pytest.raises(ValueError, match="local-heads"):
        build_lstm("--local-heads", "5")
    with pytest.raises(ValueError, match="unknown"):
        build_lstm("--local-attention", "encoder,memory")


def test_the_names_before_the_rename_still_build_the_model():
    """``lstm_doc_transformer[_tiny]``, the architecture names before the rename, are aliases:
    configs and checkpoints (whose saved arch is the old name) build the same model."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    for old, new in (("lstm_doc_transformer", "long_short_doc_transformer"),
                     ("lstm_doc_transformer_tiny", "long_short_doc_transformer_tiny")):
        assert ARCH_MODEL_REGISTRY[old] is ARCH_MODEL_REGISTRY[new] is LongShortTermMaskingTransformerModel
        from_old, from_new = argparse.Namespace(), argparse.Namespace()
        ARCH_CONFIG_REGISTRY[old](from_old)
        ARCH_CONFIG_REGISTRY[new](from_new)
        assert vars(from_old) == vars(from_new)


CONFIGS = ["configs/demo/lstm_L4.sh", "configs/lstm/lstm_L1.sh", "configs/lstm/lstm_L4.sh", "configs/lstm/lstm_3to3.sh"]


@pytest.mark.parametrize("config", CONFIGS)
def test_configs_parse_as_fairseq_train_arguments(config):
    shell = f'source {shlex.quote(os.path.join(ROOT, config))}; echo "$TASK_ARGS $MODEL_ARGS $TRAIN_ARGS"'
    words = shlex.split(subprocess.run(["bash", "-c", shell], check=True, capture_output=True, text=True).stdout)
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
        "/nonexistent-data", "--user-dir", os.path.join(ROOT, "rfa_doc_mt"), "--task", "doc_translation", *words])
    assert args.arch.startswith("long_short_doc_transformer")
    assert args.local_attention == "encoder,decoder"
