"""Local heads of RFA: softmax over the current sentence beside RFA over the window
(modules/random_feature_attention/local.py; ``--rfa-causal-local-heads``, ``--rfa-cross-local-heads``).

The three forms of the local softmax and of whole modules agree (outputs and gradients, awkward
lengths, padding, several sentences per window, a target with more sentences than its source); a
local head depends on its sentence and nothing else; decoding token by token with beam reorders,
sentence boundaries and a sentence leaving the batch equals one pass; a decoding step reads only
the current sentence; a module with local heads takes its decoding path as one without does (the
fused kernels, which tests/test_rfa_fused.py runs, are not called on a CPU's "auto" path); the tiny
model with both options trains, decodes as it runs in one pass and beam-searches."""

import pytest
import torch
from conftest import assert_fp32_close, low_precision_tolerance, probe_like
from test_rfa import (
    EOS,
    PAD,
    SEP,
    causal_module_terms,
    decay_terms,
    model_windows,
    random_windows,
    rfa_model_terms,
    tiny_model,
)

from rfa_doc_mt.modules.random_feature_attention import (
    RandomFeatureCausalAttention,
    RandomFeatureCrossAttention,
    incremental_local_causal_attention,
    incremental_local_cross_attention,
    local_attention,
    local_causal_step,
    reference_causal_module,
    reference_cross_module,
    reference_local_attention,
)
from rfa_doc_mt.modules.random_feature_attention import layers as rfa_layers
from rfa_doc_mt.modules.random_feature_attention import local as rfa_local
from rfa_doc_mt.modules.random_feature_attention.fused import uses_fused_decoding
from rfa_doc_mt.modules.random_feature_attention.local import aligned_ids
from rfa_doc_mt.modules.sentences import sentence_ids, sentence_ids_from_starts, sentence_starts

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors (conftest.one_thread)

# the modules: 16 wide, 4 heads of 4, the first 2 local; 8 random projections (16 Fourier features)
EMBED, HEADS, LOCAL = 16, 4, 2
HEAD_DIM = EMBED // HEADS


def softmax_terms(dim: int, keys: int) -> int:
    """Terms along a local head's output: the scores' dot products (dim), the softmax's sum and the
    weighted sum of the values (keys each)."""
    return dim + 2 * keys


def softmax_magnitude(q, k, v) -> float:
    """Size of the terms of a softmax attention's output: the values, times the largest score
    bound |q||k|/√d (a score's rounding error, relative to that bound, moves the probabilities
    relatively by as much, exp turning an absolute error of the exponent into a relative one)."""
    scores = q.detach().norm(dim=-1).max() * k.detach().norm(dim=-1).max() * q.size(-1) ** -0.5
    return v.detach().abs().max().item() * max(1.0, scores.item())


def module_terms(module, keys: int) -> int:
    """Longest accumulation of a module with local heads: its RFA heads' (test_rfa.causal_module_terms)
    or its local heads' (the projections, then :func:`softmax_terms`)."""
    return max(causal_module_terms(module, keys), 2 * module.embed_dim + softmax_terms(module.head_dim, keys))


def gradients(output, inputs, mask):
    """Gradients of a fixed random projection of ``output`` (conftest.probe_like) at ``mask``."""
    return torch.autograd.grad((output * probe_like(output) * mask).sum(), inputs)


def test_sentence_ids_from_starts_are_the_sentence_ids():
    generator = torch.Generator().manual_seed(0)
    tokens = random_windows(3, 23, [5, 1, 8], generator, pad_lengths=[23, 17, 20])
    tokens[1, 16] = SEP  # a separator before padding: the padding opens an empty sentence
    tokens[2, 4:6] = SEP  # consecutive separators: a sentence of a separator alone
    assert torch.equal(sentence_ids_from_starts(sentence_starts(tokens, SEP)), sentence_ids(tokens, SEP))


# ---------------------------------------------------------------------------------------
# the local softmax's three forms


@pytest.mark.parametrize("time,sentences,pad_lengths", [
    (37, [4, 1, 6], [37, 30, 23]),  # several sentences, padding after a separator in some draws
    (6, [2, 1, 3], [6, 6, 4]),
    (1, [1, 1, 1], None),
])
def test_local_causal_forms_agree(time, sentences, pad_lengths):
    generator = torch.Generator().manual_seed(time)
    tokens = random_windows(3, time, sentences, generator, pad_lengths)
    padding, ids, starts = tokens.eq(PAD), sentence_ids(tokens, SEP), sentence_starts(tokens, SEP)
    q, k, v = (torch.randn(3, 2, time, 8, generator=generator).requires_grad_() for _ in range(3))
    reference = reference_local_attention(q, k, v, ids, ids, padding, causal=True)
    training = local_attention(q, k, v, ids, ids, padding, causal=True)
    incremental = incremental_local_causal_attention(q, k, v, starts, padding)
    real = (~padding)[:, None, :, None].float()  # padding queries are never read
    terms, magnitude = softmax_terms(8, time), softmax_magnitude(q, k, v)
    assert_fp32_close(training * real, reference * real, terms, magnitude, "local causal training-reference")
    assert_fp32_close(incremental * real, reference * real, terms, magnitude, "local causal incremental-reference")
    expected = gradients(reference, (q, k, v), real)
    for name, output in (("training", training), ("incremental", incremental)):
        for gradient, wanted in zip(gradients(output, (q, k, v), real), expected):
            # the backward pass runs each sum again, transposed: twice the terms
            assert_fp32_close(gradient, wanted, 2 * terms, magnitude * max(1.0, wanted.abs().max().item()),
                              f"local causal {name} gradient")


def cross_case(source, target, generator):
    """Sources of 3/1/4 sentences (the second ends with a separator before its padding), targets of
    2/3/5 (more than their sources: clamped to the last source sentence), random q, k, v."""
    src = random_windows(3, source, [3, 1, 2 if source < 8 else 4], generator,
                         pad_lengths=[source, source - 2, source - 1])
    src[1, source - 3] = SEP
    tgt = random_windows(3, target, [2, 3, 5], generator)
    q = torch.randn(3, 2, target, 8, generator=generator).requires_grad_()
    k, v = (torch.randn(3, 2, source, 8, generator=generator).requires_grad_() for _ in range(2))
    return src, tgt, q, k, v


@pytest.mark.parametrize("source,target", [(19, 11), (6, 13)])
def test_local_cross_forms_agree(source, target):
    generator = torch.Generator().manual_seed(source)
    src, tgt, q, k, v = cross_case(source, target, generator)
    padding = src.eq(PAD)
    query_ids, key_ids = aligned_ids(sentence_ids(tgt, SEP), sentence_ids(src, SEP), padding)
    assert query_ids[1].max() == 0 and sentence_ids(tgt, SEP)[1].max() > 0  # clamped to the one source sentence
    reference = reference_local_attention(q, k, v, query_ids, key_ids, padding)
    training = local_attention(q, k, v, query_ids, key_ids, padding)
    incremental = incremental_local_cross_attention(q, k, v, sentence_starts(tgt, SEP), sentence_ids(src, SEP), padding)
    terms, magnitude = softmax_terms(8, source), softmax_magnitude(q, k, v)
    assert_fp32_close(training, reference, terms, magnitude, "local cross training-reference")
    assert_fp32_close(incremental, reference, terms, magnitude, "local cross incremental-reference")
    ones = torch.ones(())
    expected = gradients(reference, (q, k, v), ones)
    for name, output in (("training", training), ("incremental", incremental)):
        for gradient, wanted in zip(gradients(output, (q, k, v), ones), expected):
            assert_fp32_close(gradient, wanted, 2 * terms, magnitude * max(1.0, wanted.abs().max().item()),
                              f"local cross {name} gradient")


def test_a_causal_decoding_step_keeps_only_the_current_sentences():
    """The keys kept are as many as the longest current sentence of the batch so far, however long
    the window: a step's work is flat in L."""
    generator = torch.Generator().manual_seed(3)
    time = 90
    tokens = random_windows(2, time, [15, 11], generator)
    starts = sentence_starts(tokens, SEP)
    ids = sentence_ids(tokens, SEP)
    q, k, v = (torch.randn(2, 2, time, 4, generator=generator) for _ in range(3))
    cache = {}
    for t in range(time):
        local_causal_step(q[:, :, t], k[:, :, t], v[:, :, t], cache, starts[:, t])
        so_far = [int(ids[row, :t + 1].eq(ids[row, t]).sum()) for row in range(2)]
        assert cache["local_keys"].size(2) == max(so_far), t
        assert cache["local_valid"].sum(1).tolist() == so_far, t
    assert max(ids[:, -1]) >= 10  # many sentences went by


def test_a_cross_decoding_step_reads_only_the_aligned_sentence(monkeypatch):
    generator = torch.Generator().manual_seed(4)
    src, tgt, q, k, v = cross_case(19, 11, generator)
    read = []
    attend = rfa_local._attend_one
    monkeypatch.setattr(rfa_local, "_attend_one", lambda q, keys, *rest: read.append(keys.size(2)) or
                        attend(q, keys, *rest))
    with torch.no_grad():
        incremental_local_cross_attention(q, k, v, sentence_starts(tgt, SEP), sentence_ids(src, SEP), src.eq(PAD))
    query_ids, key_ids = aligned_ids(sentence_ids(tgt, SEP), sentence_ids(src, SEP), src.eq(PAD))
    lengths = [max(int(key_ids[row].eq(query_ids[row, t]).sum()) for row in range(3)) for t in range(11)]
    assert read == lengths and max(lengths) < 19


# ---------------------------------------------------------------------------------------
# whole modules: three forms


def causal_module(gate="none", chunk_size=8, local_heads=LOCAL, seed=3):
    torch.manual_seed(seed)
    module = RandomFeatureCausalAttention(EMBED, HEADS, 8, seed=11, gate=gate, learned_tau=True,
                                          gate_bias_init=0.5, chunk_size=chunk_size, local_heads=local_heads).eval()
    with torch.no_grad():
        module.tau.copy_(torch.linspace(0.7, 1.3, module.rfa_heads))
    return module


def cross_module(cross_gate=False, local_heads=LOCAL, seed=3):
    torch.manual_seed(seed)
    return RandomFeatureCrossAttention(EMBED, HEADS, 8, seed=5, kdim=12, gate="sgate" if cross_gate else "none",
                                       cross_gate=cross_gate, learned_tau=True, local_heads=local_heads).eval()


def hand_cross(module, src, tgt):
    module.hand_in(sentence_starts=sentence_starts(src, SEP), target_sentence_starts=sentence_starts(tgt, SEP),
                   source_sentence_ids=sentence_ids(src, SEP))


def test_modules_take_their_local_heads_from_the_front_and_keep_rfa_parameters_for_the_rest():
    causal, cross = causal_module("sgate"), cross_module(cross_gate=True)
    for module in (causal, cross):
        assert (module.local_heads, module.rfa_heads) == (LOCAL, HEADS - LOCAL)
        assert module.tau.shape == (HEADS - LOCAL,) and module.gate_proj.out_features == HEADS - LOCAL
        assert module.random_matrices.eval_matrix.size(0) == HEADS - LOCAL
    for heads in (-1, HEADS):
        with pytest.raises(ValueError, match="local heads"):
            RandomFeatureCausalAttention(EMBED, HEADS, 8, seed=1, local_heads=heads)


@pytest.mark.parametrize("gate", ["none", "sgate", "feature"])
def test_causal_module_forms_agree(gate):
    module = causal_module(gate)
    generator = torch.Generator().manual_seed(5)
    time = 29  # four chunks of 8, the last one short
    tokens = random_windows(3, time, [4, 1, 6], generator, pad_lengths=[29, 21, 25])
    padding = tokens.eq(PAD)
    x = torch.randn(time, 3, EMBED, generator=generator, requires_grad=True)
    module.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    reference = reference_causal_module(module, x, padding)
    training, _ = module(x, x, x, key_padding_mask=padding)
    log_forget, _ = module._gates(x, padding)
    module.hand_in()
    incremental = torch.cat([out for out in _steps(module, x, tokens, padding)], 0)
    real = (~padding).T.unsqueeze(-1).float()
    terms = module_terms(module, time) + decay_terms(time, log_forget)
    assert_fp32_close(training * real, reference * real, terms, name=f"causal module {gate} training-reference")
    assert_fp32_close(incremental * real, reference * real, terms, name=f"causal module {gate} incremental-reference")
    (expected,), (got,) = gradients(reference, (x,), real), gradients(training, (x,), real)
    assert_fp32_close(got, expected, 2 * terms, name=f"causal module {gate} gradient")


def _steps(module, x, tokens, padding=None):
    """The causal module one token at a time, the sentence starts handed in as the decoder does."""
    state = {}
    for t in range(x.size(0)):
        module.hand_in(sentence_starts=sentence_starts(tokens[:, max(0, t - 1):t + 1], SEP)[:, -1:])
        yield module(x[t:t + 1], key_padding_mask=None if padding is None else padding[:, t:t + 1],
                     incremental_state=state)[0]
    module.hand_in()


# 19 source tokens: the training form reads the RFA heads' summary; 6: through the keys
@pytest.mark.parametrize("cross_gate", [False, True])
@pytest.mark.parametrize("source", [19, 6])
def test_cross_module_forms_agree(cross_gate, source):
    module = cross_module(cross_gate)
    generator = torch.Generator().manual_seed(6)
    src, tgt, *_ = cross_case(source, 11, generator)
    padding = src.eq(PAD)
    query = torch.randn(11, 3, EMBED, generator=generator, requires_grad=True)
    encoder_out = torch.randn(source, 3, 12, generator=generator, requires_grad=True)
    hand_cross(module, src, tgt)
    reference = reference_cross_module(module, query, encoder_out, padding)
    training, _ = module(query, encoder_out, encoder_out, key_padding_mask=padding)
    terms = module_terms(module, source)
    assert_fp32_close(training, reference, terms, name=f"cross module training-reference (gate {cross_gate})")
    ones = torch.ones(())
    for got, expected, name in zip(gradients(training, (query, encoder_out), ones),
                                   gradients(reference, (query, encoder_out), ones), ("query", "encoder output")):
        assert_fp32_close(got, expected, 2 * terms, name=f"cross module gradient of the {name}")


def test_local_heads_in_reduced_precision():
    """bf16 autocast (full pass and decoding) stays near fp32; an fp16 module computes in fp16."""
    module = causal_module("sgate")
    generator = torch.Generator().manual_seed(12)
    tokens = random_windows(2, 30, [4, 3], generator)
    x = torch.randn(30, 2, EMBED, generator=generator)
    module.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    reference, _ = module(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = module(x)
        low_incremental = torch.cat(list(_steps(module, x, tokens)))
    assert low.dtype == low_incremental.dtype == torch.bfloat16
    scale = reference.abs().max().item()
    # an RFA head (test_rfa's bound): 4 roundings of the projections' inputs and weights, 2 x 4 of the
    # features' angles; a local head: the same 4, then its probabilities and output rounded once
    # each and its scores, whose rounding moves the probabilities relatively by up to the largest
    # score bound |q||k|/√d
    q, k, _ = module._split_qkv(x)
    scores = (q[:, :LOCAL].norm(dim=-1).max() * k[:, :LOCAL].norm(dim=-1).max()).item() * HEAD_DIM ** -0.5
    bound = low_precision_tolerance(max(4 + 2 * 4, 4 + 2 + max(1.0, scores)), scale)
    for name, output in (("full", low), ("incremental", low_incremental)):
        difference = (output.float() - reference).abs().max().item()
        print(f"[bf16] {name} vs fp32: {difference:.3g} (bound {bound:.3g})")
        assert difference <= bound
    half = causal_module("sgate").half()
    half.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    out, _ = half(x.half())
    stepped = torch.cat(list(_steps(half, x.half(), tokens)))
    assert out.dtype == stepped.dtype == torch.float16 and torch.isfinite(out).all() and torch.isfinite(stepped).all()


# ---------------------------------------------------------------------------------------
# decoding with beam search's reorders


def beam_orders(sentences, beam, steps, leave_at, generator):
    """fairseq's reorders over [sentence, beam] rows: each beam continues a beam of its sentence
    chosen at random; after step ``leave_at`` the first remaining sentence leaves the batch."""
    orders, count = [], sentences
    for t in range(steps):
        kept = range(1, count) if t == leave_at else range(count)
        orders.append(torch.tensor([position * beam + int(torch.randint(beam, (1,), generator=generator))
                                    for position in kept for _ in range(beam)]))
        count = len(kept)
    return orders


def follow(histories, order):
    return [list(histories[row]) for row in order.tolist()]


@pytest.mark.parametrize("gate", ["none", "sgate"])
def test_causal_module_decodes_with_beam_reorders_as_one_pass(gate):
    """Every row, after every step, reads what one pass over the prefix it continues reads: its
    current sentence's keys follow the beams, and new sentences start inside the decoded part."""
    module = causal_module(gate)
    generator = torch.Generator().manual_seed(7)
    sentences, beam, steps = 2, 3, 14
    tokens = torch.randint(4, 12, (sentences * beam, steps), generator=generator)
    tokens[tokens.lt(6)] = SEP  # about one token in four a separator
    x = torch.randn(steps, sentences * beam, EMBED, generator=generator)
    orders = beam_orders(sentences, beam, steps, leave_at=9, generator=generator)
    histories, state, starts_seen = [[] for _ in range(sentences * beam)], {}, 0
    with torch.no_grad():  # as beam search: the RFA state is updated in place
        for t in range(steps):
            rows = len(histories)
            for row in range(rows):
                histories[row].append((x[t, row], tokens[row, t]))
            history_tokens = torch.stack([torch.stack([token for _, token in h]) for h in histories])
            starts = sentence_starts(history_tokens, SEP)
            starts_seen += int(starts[:, -1].sum())
            module.hand_in(sentence_starts=starts[:, -1:])
            out, _ = module(x[t:t + 1, :rows], incremental_state=state)
            history_x = torch.stack([torch.stack([vector for vector, _ in h]) for h in histories], 1)
            module.hand_in(sentence_starts=starts)
            full, _ = module(history_x)
            log_forget, _ = module._gates(history_x, None)
            assert_fp32_close(out[0], full[-1], module_terms(module, t + 1) + decay_terms(t + 1, log_forget),
                              name=f"causal step {t} against one pass")
            module.reorder_incremental_state(state, orders[t])
            histories = follow(histories, orders[t])
    assert starts_seen >= 4


@pytest.mark.parametrize("cross_gate", [False, True])
def test_cross_module_decodes_with_beam_reorders_as_one_pass(cross_gate):
    """The beams of a sentence share its cached source; each row's target sentence follows its
    beam; a sentence leaving the batch leaves the others reading their own sources (4 of 5
    sentences left: their sources are read through ``rows``, not yet compacted)."""
    module = cross_module(cross_gate)
    generator = torch.Generator().manual_seed(8)
    sentences, beam, steps, source = 5, 2, 12, 19
    src = random_windows(sentences, source, [3, 1, 4, 2, 5], generator, pad_lengths=[19, 15, 17, 12, 19])
    encoder_out = torch.randn(source, sentences, 12, generator=generator)
    tokens = torch.randint(4, 12, (sentences * beam, steps), generator=generator)
    tokens[tokens.lt(6)] = SEP
    query = torch.randn(steps, sentences * beam, EMBED, generator=generator)
    orders = beam_orders(sentences, beam, steps, leave_at=5, generator=generator)
    module.set_beam_size(beam)
    row_source = torch.arange(sentences).repeat_interleave(beam)
    histories, state, used_rows = [[] for _ in range(sentences * beam)], {}, False
    with torch.no_grad():
        for t in range(steps):
            rows = len(histories)
            for row in range(rows):
                histories[row].append((query[t, row], tokens[row, t]))
            history_tokens = torch.stack([torch.stack([token for _, token in h]) for h in histories])
            source_rows = src[row_source]
            module.hand_in(sentence_starts=sentence_starts(source_rows, SEP),
                           target_sentence_starts=sentence_starts(history_tokens, SEP)[:, -1:],
                           source_sentence_ids=sentence_ids(source_rows, SEP) if t == 0 else None)
            out, _ = module(query[t:t + 1, :rows], encoder_out[:, row_source] if t == 0 else None,
                            key_padding_mask=source_rows.eq(PAD), incremental_state=state)
            history_query = torch.stack([torch.stack([vector for vector, _ in h]) for h in histories], 1)
            hand_cross(module, source_rows, history_tokens)  # one pass: every row with its own copy of its source
            full, _ = module(history_query, encoder_out[:, row_source], key_padding_mask=source_rows.eq(PAD))
            assert_fp32_close(out[0], full[-1], module_terms(module, source), name=f"cross step {t} against one pass")
            module.reorder_incremental_state(state, orders[t])
            histories = follow(histories, orders[t])
            row_source = row_source[orders[t]]
            used_rows |= module._get_input_buffer(state).get("rows") is not None
    assert len(histories) == (sentences - 1) * beam and used_rows
    assert sentence_ids(history_tokens, SEP)[:, -1].max() >= 2  # rows went through several sentences


# ---------------------------------------------------------------------------------------
# what a local head depends on


def keep_heads_apart(module):
    """out_proj the identity: output channels [h * head_dim, (h + 1) * head_dim) are head h's."""
    with torch.no_grad():
        module.out_proj.weight.copy_(torch.eye(module.embed_dim))
        module.out_proj.bias.zero_()


def depends_on(output, inputs, row, position, head):
    """[time_k] bool: the positions of ``inputs`` [time_k, batch, dim] in ``row`` that head
    ``head``'s output at ``position`` depends on (non-zero gradient of a random projection of it)."""
    head_output = output[position, row, head * HEAD_DIM:(head + 1) * HEAD_DIM]
    gradient, = torch.autograd.grad((head_output * probe_like(head_output)).sum(), inputs, retain_graph=True)
    return gradient[:, row].abs().sum(-1).gt(0)


def test_causal_local_heads_see_their_sentence_so_far_and_nothing_else():
    module = causal_module()
    keep_heads_apart(module)
    generator = torch.Generator().manual_seed(9)
    tokens = random_windows(2, 24, [4, 3], generator, pad_lengths=[24, 20])
    padding, ids = tokens.eq(PAD), sentence_ids(tokens, SEP)
    x = torch.randn(24, 2, EMBED, generator=generator, requires_grad=True)
    module.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    output, _ = module(x, key_padding_mask=padding)
    checked = 0
    for row in range(2):
        for position in range(int((~padding[row]).sum())):
            visible = ~padding[row] & (torch.arange(24) <= position)
            own = visible & ids[row].eq(ids[row, position])
            for head in range(HEADS):
                expected = own if head < LOCAL else visible
                assert depends_on(output, x, row, position, head).tolist() == expected.tolist(), (row, position, head)
            checked += int((visible & ~own).any())  # a position with other sentences before it
    assert checked > 10
    # changing another sentence leaves the local heads' output as it was; changing its own moves it
    row, position = 0, int(ids[0].eq(ids[0].max()).nonzero()[-1])  # the last token of the last sentence
    others = (ids[0] != ids[0, position]).nonzero().view(-1)
    own = (ids[0] == ids[0, position]).nonzero().view(-1)
    for positions, changes in ((others, False), (own, True)):
        moved = x.detach().clone()
        moved[positions, row] += torch.randn(len(positions), EMBED, generator=generator)
        new, _ = module(moved, key_padding_mask=padding)
        difference = (new - output)[position, row, :LOCAL * HEAD_DIM].abs().max().item()
        assert (difference > 1e-3) if changes else (difference == 0.0), (changes, difference)


def test_cross_local_heads_see_the_aligned_source_sentence_and_nothing_else():
    module = cross_module()
    keep_heads_apart(module)
    generator = torch.Generator().manual_seed(10)
    src, tgt, *_ = cross_case(19, 11, generator)
    padding = src.eq(PAD)
    query = torch.randn(11, 3, EMBED, generator=generator)
    encoder_out = torch.randn(19, 3, 12, generator=generator, requires_grad=True)
    hand_cross(module, src, tgt)
    output, _ = module(query, encoder_out, key_padding_mask=padding)
    source_ids, target_ids = sentence_ids(src, SEP), sentence_ids(tgt, SEP)
    for row in range(3):
        last = int(source_ids[row][~padding[row]].max())
        for position in range(11):
            aligned = source_ids[row].eq(min(int(target_ids[row, position]), last)) & ~padding[row]
            for head in range(HEADS):
                expected = aligned if head < LOCAL else ~padding[row]
                assert depends_on(output, encoder_out, row, position, head).tolist() == expected.tolist()
    # row 2, its last target sentence: the source's changes outside the aligned sentence leave it
    position = 10
    aligned = source_ids[2].eq(min(int(target_ids[2, position]), int(source_ids[2][~padding[2]].max())))
    others = (~aligned & ~padding[2]).nonzero().view(-1)
    for positions, changes in ((others, False), (aligned.nonzero().view(-1), True)):
        moved = encoder_out.detach().clone()
        moved[positions, 2] += torch.randn(len(positions), 12, generator=generator)
        new, _ = module(query, moved, key_padding_mask=padding)
        difference = (new - output)[position, 2, :LOCAL * HEAD_DIM].abs().max().item()
        assert (difference > 1e-3) if changes else (difference == 0.0), (changes, difference)


# ---------------------------------------------------------------------------------------
# decoding path and the model


def test_a_module_with_local_heads_takes_its_decoding_path_as_one_without(monkeypatch):
    """Local heads have fused kernels beside the RFA heads' (tests/test_rfa_fused.py runs them): a
    module with them is fused where one without is, "auto" on a CPU decodes eagerly, and a causal
    attention with the delta rule (no kernel) decodes eagerly on every path, its local heads too."""
    step = torch.zeros(1, 2, EMBED)
    for make in (causal_module, cross_module):
        local, plain = make(), make(local_heads=0)
        for module in (local, plain):
            assert not uses_fused_decoding(module, step)  # auto, CPU
            module.decoding_path = "fused"
            assert uses_fused_decoding(module, step)
    delta = RandomFeatureCausalAttention(EMBED, HEADS, 8, seed=11, update="delta", local_heads=LOCAL)
    delta.decoding_path = "fused"
    assert not uses_fused_decoding(delta, step)

    def fused(*args, **kwargs):
        raise AssertionError("a fused kernel was called on the auto path on a CPU")

    for name in ("fused_causal_step", "fused_cross_read", "fused_local_causal_step", "fused_local_cross_step"):
        monkeypatch.setattr(rfa_layers, name, fused)
    causal, cross = causal_module(), cross_module()
    tokens = torch.tensor([[4, SEP, 5], [SEP, 6, 7]])
    with torch.no_grad():
        outputs = list(_steps(causal, torch.randn(3, 2, EMBED), tokens))
        state = {}
        src = torch.tensor([[4, SEP, 5, EOS], [6, 7, EOS, PAD]])
        hand_cross(cross, src, tokens[:, :1])
        cross(torch.randn(1, 2, EMBED), torch.randn(4, 2, 12), key_padding_mask=src.eq(PAD), incremental_state=state)
    assert len(outputs) == 3 and cross._get_input_buffer(state).get("local_sentence") is not None


LOCAL_OPTIONS = ["--rfa-cross-local-heads", "2", "--rfa-causal-local-heads", "2"]


@pytest.mark.parametrize("update", ["add", "delta"])
def test_tiny_model_with_local_heads_trains_and_decodes_as_one_pass(update):
    """Local heads beside RFA heads whose causal state adds, or follows the delta rule (its write
    strengths then belong to the RFA heads alone)."""
    model, _ = tiny_model("sgate", extra=LOCAL_OPTIONS + ["--rfa-gate-bias-init", "0.5", "--rfa-update", update])
    for layer in model.decoder.layers:
        assert layer.self_attn.local_heads == layer.encoder_attn.local_heads == 2
        assert layer.self_attn.rfa_heads == layer.encoder_attn.rfa_heads == 2
        assert layer.self_attn.state_update == update
        if update == "delta":
            assert layer.self_attn.beta_proj.out_features == 2
    generator = torch.Generator().manual_seed(8)
    src = model_windows(3, 17, 3, generator, lengths=[17, 11, 14])
    target = model_windows(3, 21, 4, generator, lengths=[21, 21, 16])
    prev = torch.cat([torch.full((3, 1), EOS), target[:, :-1]], 1)
    prev[2, 16:] = PAD
    lengths = src.ne(PAD).sum(1)
    # a training step reaches the local heads' projections
    model.train()
    logits, _ = model(src, lengths, prev)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=PAD)
    loss.backward()
    layer = model.decoder.layers[0]
    local_rows = torch.cat([torch.arange(LOCAL * 32) + part * 128 for part in range(3)])  # q, k, v of heads 0, 1
    assert layer.self_attn.in_proj.weight.grad[local_rows].abs().sum() > 0
    assert layer.encoder_attn.kv_proj.weight.grad[:LOCAL * 32].abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        encoder_out = model.encoder(src, lengths)
        full, _ = model.decoder(prev, encoder_out)
        state, steps = {}, []
        for t in range(21):
            steps.append(model.decoder(prev[:, :t + 1], encoder_out, incremental_state=state)[0])
    real = prev.ne(PAD).unsqueeze(-1)
    assert_fp32_close(torch.cat(steps, 1) * real, full * real, rfa_model_terms(model, source=17, target=21),
                      name="decoder with local heads full-incremental")


def test_local_heads_options_are_checked():
    with pytest.raises(ValueError, match="--rfa-cross-local-heads 4: at most 3"):
        tiny_model(extra=["--rfa-cross-local-heads", "4"])
    with pytest.raises(ValueError, match="--rfa-cross-local-heads 2: expected 0"):
        tiny_model(extra=["--rfa-cross-local-heads", "2", "--rfa-attention", "causal"])
    model, _ = tiny_model(extra=["--rfa-causal-local-heads", "1"])
    assert [layer.self_attn.local_heads for layer in model.decoder.layers] == [1, 1]
    assert [layer.encoder_attn.local_heads for layer in model.decoder.layers] == [0, 0]
