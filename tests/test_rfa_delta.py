"""The delta rule on RFA's causal state (``--rfa-update delta``; Schlag et al. 2021, Yang et al.
2024 (delta rule), gated: Yang et al. 2025): its three forms agree (outputs, final states, gradients), equal
flash-linear-attention's naive delta-rule forms, overwrite what a key stored, and the module and
the model decode token by token as they run in one pass, through beam reorders.

Tolerances: see :func:`delta_terms` and :func:`delta_magnitude` (conftest's fp32 bound)."""

import pytest
import torch
from conftest import assert_fp32_close, probe_like
from test_rfa import (
    EOS,
    PAD,
    SEP,
    _load_fla_naive,
    gates_of,
    model_windows,
    op_inputs,
    random_windows,
    rfa_model_terms,
    tiny_model,
)

from rfa_doc_mt.modules.random_feature_attention import (
    RandomFeatureCausalAttention,
    chunked_delta_rule,
    incremental_delta_rule,
    l2_normalise,
    reference_delta_rule,
)
from rfa_doc_mt.modules.random_feature_attention.fused import uses_fused_decoding
from rfa_doc_mt.modules.random_feature_attention.layers import set_decoding_path
from rfa_doc_mt.modules.sentences import sentence_starts

# the gates the forms take (one per head); the model refuses sgate-avg with the delta rule, the
# forms take its key weight as any other
PER_HEAD_GATES = ["none", "sgate", "sgate-avg", "token"]
MODEL_GATES = ["none", "sgate", "token"]
# roundings of one step of the recurrence besides its sums: the decay, the difference v - k̂ᵀS,
# its product with b, the outer product with k̂ and its sum into the state
STEP_ROUNDINGS = 5

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors (conftest.one_thread)


def delta_terms(time: int, features: int, chunk: int = 1) -> int:
    """Terms along the longest path to an output or a final state of the delta rule, over ``time``
    tokens of F = ``features``, in chunks of ``chunk`` tokens (1: the recurrent forms).

    Every step maps each column of the state by ``α (I - b k̂k̂ᵀ)``, which does not lengthen it
    (``|k̂| = 1``, ``0 ≤ b ≤ 1``, ``α ≤ 1``): an error made at one step is carried to the later ones,
    not amplified, so to first order the errors of the steps add, as those of a chain of sums do
    (conftest). A step of the recurrence sums the F terms of ``k̂ᵀS`` and rounds
    :data:`STEP_ROUNDINGS` more times; the readout sums F terms. A chunk takes the products
    ``q̂·k̂``, ``k̂·k̂``, ``k̂ᵀS_0`` and ``q̂ᵀS_0`` (F terms each) and sums over its C tokens for the
    outputs and for the state it leaves; its writes come from a forward substitution, backward
    stable with errors of γ_C |A| (Higham, §8.1), which (I + A)⁻¹ diag(b) carries to each write
    at most C times over (a write changes a later one by at most b ≤ 1 times itself: the
    contraction again), C² terms a chunk. So ``4F + 3C + 5`` terms a token bound both forms."""
    return time * (4 * features + 3 * chunk + STEP_ROUNDINGS) + features


def delta_magnitude(v, strength, initial_state=None) -> float:
    """A bound on every term of the delta rule: each column d of the state keeps
    ``|S_t e_d|² ≤ |S_{t-1} e_d|² + b_t v_{t,d}²`` (along k̂_t the new value is a convex combination
    ``(1 - b) α k̂ᵀS e_d + b v_{t,d}``, across it the state only decays), so the state's entries and
    the outputs ``q̂ᵀ S e_d`` stay within ``(|S_0 e_d|² + Σ_t b_t v_{t,d}²)^½``; a write's
    ``v - k̂ᵀS`` within that plus |v|. ``strength``: b [batch, heads, time]."""
    columns = (strength.detach().double().unsqueeze(-1) * v.detach().double() ** 2).sum(2)  # [batch, heads, dv]
    if initial_state is not None:
        columns = columns + (initial_state.detach().double() ** 2).sum(-2)
    return columns.sqrt().max().item() + v.detach().abs().max().item()


def delta_op_inputs(gate, time=37, sentences=(3, 1), pad_lengths=None, seed=0, features=8):
    """op_inputs (positive features, values, gate logits) with the write strengths' logits."""
    inputs = op_inputs(time=time, sentences=sentences, gate=gate, pad_lengths=pad_lengths, seed=seed,
                       features=features)
    generator = torch.Generator().manual_seed(seed + 1000)
    inputs["beta_logits"] = 2 * torch.randn(inputs["v"].shape[:3], generator=generator)
    return inputs


def delta_arguments(inputs, tensors=None):
    """(phi_q, phi_k, v, β, log_forget, key_weight) of ``inputs``, from ``tensors`` (the same
    names, e.g. leaves that need a gradient) where given."""
    tensors = inputs if tensors is None else tensors
    log_forget, key_weight = gates_of(inputs, tensors["logits"])
    return (tensors["phi_q"], tensors["phi_k"], tensors["v"], torch.sigmoid(tensors["beta_logits"]), log_forget,
            key_weight)


def strength_of(arguments):
    """b = β c of delta_arguments."""
    beta, key_weight = arguments[3], arguments[5]
    return beta if key_weight is None else beta * key_weight


# ---------------------------------------------------------------------------------------
# the forms: reference = training (chunked) = incremental


@pytest.mark.parametrize("gate", PER_HEAD_GATES)
@pytest.mark.parametrize("time,chunk_size,sentences,pad_lengths", [
    (1, 4, (1, 1), None),
    (37, 8, (3, 1), [37, 30]),        # not a multiple of the chunk; padding
    (64, 16, (15, 2), None),          # exactly 4 chunks, 15 sentences
    (101, 32, (7, 12), [90, 101]),
])
def test_delta_forms_agree(gate, time, chunk_size, sentences, pad_lengths):
    """Each fp32 form against the reference in fp64 (outputs and final states), and the gradients
    of the chunked form against the reference's in fp32, through features, values, gates and β."""
    inputs = delta_op_inputs(gate, time, sentences, pad_lengths, seed=time)
    names = ("phi_q", "phi_k", "v", "logits", "beta_logits")
    exact_out, exact_state = reference_delta_rule(*(x if x is None else x.double() for x in delta_arguments(inputs)))
    assert exact_out.dtype == exact_state.dtype == torch.float64
    leaves = {name: inputs[name].clone().requires_grad_() for name in names}
    arguments = delta_arguments(inputs, leaves)
    forms = {"reference": reference_delta_rule(*arguments),
             "chunked": chunked_delta_rule(*arguments, chunk_size=chunk_size),
             "incremental": incremental_delta_rule(*arguments)}
    # a training step needs no final state: the same outputs, and no state built after the last chunk
    outputs_only, no_state = chunked_delta_rule(*arguments, chunk_size=chunk_size, final_state=False)
    assert no_state is None and torch.equal(outputs_only, forms["chunked"][0])
    terms = delta_terms(time, inputs["phi_q"].size(-1), chunk_size)
    magnitude = delta_magnitude(inputs["v"], strength_of(delta_arguments(inputs)))
    name = f"delta {gate} T={time} chunk={chunk_size}"
    for form, (out, state) in forms.items():
        assert out.dtype == state.dtype == torch.float32 and state.shape == (2, 3, 8, 5)
        # padded queries read the state too (it is the same in every form): compared everywhere
        assert_fp32_close(out, exact_out, terms, magnitude, f"{name}: out {form}-exact")
        assert_fp32_close(state, exact_state, terms, magnitude, f"{name}: final state {form}-exact")
    # gradients: the backward pass runs every sum again, transposed, and sums over the values (dv);
    # the size of their terms is the largest gradient
    weights = probe_like(exact_out.float())
    grads = [torch.autograd.grad((out * weights).sum() + 0.1 * state.sum(), list(leaves.values()), allow_unused=True,
                                 retain_graph=True)
             for out, state in (forms["reference"], forms["chunked"])]
    for leaf, reference, chunked in zip(names, *grads):
        if leaf == "logits" and gate == "none":
            assert reference is None and chunked is None
            continue
        # one token from a zero state: no gate has anything to decay
        assert reference.abs().max() > 0 or (leaf == "logits" and time == 1), f"{name}: no gradient reaches {leaf}"
        assert_fp32_close(chunked, reference, 2 * (terms + inputs["v"].size(-1)),
                          name=f"{name}: gradient of {leaf} reference-chunked")


@pytest.mark.parametrize("gate", PER_HEAD_GATES)
def test_every_delta_form_continues_from_an_initial_state(gate):
    """Run on the first 12 tokens, then on the rest from the state the prefix left, each form
    gives what it gives on the whole sequence, and leaves the state it was given as it was."""
    inputs = delta_op_inputs(gate, time=30, sentences=(4, 3), pad_lengths=[30, 26], seed=3)
    sequence = delta_arguments(inputs)
    terms = delta_terms(30, 8, chunk=8)
    magnitude = delta_magnitude(inputs["v"], strength_of(sequence))
    forms = {"reference": reference_delta_rule, "chunked": lambda *a, **k: chunked_delta_rule(*a, **k, chunk_size=8),
             "incremental": incremental_delta_rule}
    for name, form in forms.items():
        full_out, full_state = form(*sequence)
        _, prefix_state = form(*(None if x is None else x[:, :, :12] for x in sequence))
        prefix_copy = prefix_state.clone()
        out, state = form(*(None if x is None else x[:, :, 12:] for x in sequence), initial_state=prefix_state)
        assert torch.equal(prefix_state, prefix_copy), f"{name} changed the initial state it was given"
        assert_fp32_close(out, full_out[:, :, 12:], terms, magnitude, f"{gate} {name}: continued = whole")
        assert_fp32_close(state, full_state, terms, magnitude, f"{gate} {name}: final state continued = whole")


def test_the_delta_rule_overwrites_what_a_key_stored():
    """Three writes: k_1 → v_1, an orthogonal k_2 → v_2, then k_1 → v_3. At full strength (β = 1)
    the last token reads v_3 with k_1 (an additive state would hold v_1 + v_3) and still v_2 with
    k_2, in every form. At β = ½ every write goes half the way from what the key reads to its new
    value: ½ v_1, then ½ v_2, then ½ v_1 + ½ (v_3 - ½ v_1)."""
    phi_k = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [1.0, 0, 0, 0]]).view(1, 1, 3, 4)
    v1, v2, v3 = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 0.5]), torch.tensor([-4.0, 7.0])
    v = torch.stack([v1, v2, v3]).view(1, 1, 3, 2)
    cases = [(1.0, phi_k[:, :, 0], v3), (1.0, phi_k[:, :, 1], v2),
             (0.5, phi_k[:, :, 0], v1 / 2 + (v3 - v1 / 2) / 2), (0.5, phi_k[:, :, 1], v2 / 2)]
    for beta_value, query, expected in cases:
        beta = torch.full((1, 1, 3), beta_value)
        phi_q = query.unsqueeze(2).expand(1, 1, 3, 4)  # the query of every token (the last one is read)
        for form in (reference_delta_rule, chunked_delta_rule, incremental_delta_rule):
            out, _ = form(phi_q, phi_k, v, beta)
            assert_fp32_close(out[0, 0, 2], expected, delta_terms(3, 4, chunk=3), delta_magnitude(v, beta),
                              f"{form.__name__} β={beta_value}: read after overwriting")


def test_delta_forms_refuse_a_gate_per_feature():
    inputs = delta_op_inputs("feature", time=5)
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    beta = torch.sigmoid(inputs["beta_logits"])
    for form in (reference_delta_rule, chunked_delta_rule, incremental_delta_rule):
        with pytest.raises(ValueError, match="one gate per head"):
            form(inputs["phi_q"], inputs["phi_k"], inputs["v"], beta, log_forget, key_weight)


@pytest.mark.parametrize("gate", ["none", "sgate", "token"])
def test_delta_forms_equal_flash_linear_attentions_naive_delta_rule(gate):
    """A peer check, on the same unit-norm features, write strengths b = β c and gates: ungated,
    fla's ``delta_rule_recurrence`` (from an initial state) and ``delta_rule_chunkwise`` (none:
    a length of whole chunks); gated, ``naive_recurrent_gated_delta_rule`` and
    ``naive_chunk_gated_delta_rule`` (from an initial state, a length that is not whole chunks).

    fla's conventions: [batch, heads, time, dim] for the delta rule, [batch, time, heads, dim] for
    the gated one; β [.., time, heads]-shaped like the gate g = log α; q scaled by scale, or by
    K^-½ always in the ungated forms (q is given times √F there); the state [batch, heads, K, V];
    no normaliser (as ours). Both its recurrent forms compute in fp32 whatever the input."""
    inputs = delta_op_inputs(gate, time=45, sentences=(3, 2), pad_lengths=[45, 38], seed=31)
    arguments = delta_arguments(inputs)
    phi_q, phi_k, v, _, log_forget, _ = (x if x is None else x.double() for x in arguments)
    strength = strength_of(arguments).double()
    q, k = l2_normalise(phi_q), l2_normalise(phi_k)
    generator = torch.Generator().manual_seed(32)
    initial = torch.randn(2, 3, 8, 5, generator=generator, dtype=torch.float64) / 3
    exact, exact_state = reference_delta_rule(q, k, v, strength, log_forget, initial_state=initial)
    ours = chunked_delta_rule(*(x.float() for x in (q, k, v, strength)), None if log_forget is None else
                              log_forget.float(), initial_state=initial.float(), chunk_size=16)
    peers = {"ours, chunked": ours}
    root_f = q.size(-1) ** 0.5
    if gate == "none":
        naive = _load_fla_naive("delta_rule/naive.py")
        peers["fla recurrent"] = naive.delta_rule_recurrence(q * root_f, k, v, strength, initial_state=initial.clone())
        whole = 32  # delta_rule_chunkwise: no initial state, whole chunks
        peers["fla chunkwise"] = naive.delta_rule_chunkwise(q[:, :, :whole] * root_f, k[:, :, :whole],
                                                            v[:, :, :whole], strength[:, :, :whole], chunk_size=16)
        prefix, prefix_state = reference_delta_rule(q[:, :, :whole], k[:, :, :whole], v[:, :, :whole],
                                                    strength[:, :, :whole])
    else:
        naive = _load_fla_naive("gated_delta_rule/naive.py")

        def fla_layout(x):  # [batch, heads, time, ...] → [batch, time, heads, ...]
            return x.transpose(1, 2).contiguous()

        recurrent = naive.naive_recurrent_gated_delta_rule(
            fla_layout(q), fla_layout(k), fla_layout(v), fla_layout(strength), fla_layout(log_forget), scale=1.0,
            initial_state=initial.clone(), output_final_state=True)
        chunk = naive.naive_chunk_gated_delta_rule(
            fla_layout(q), fla_layout(k), fla_layout(v), fla_layout(log_forget), fla_layout(strength), chunk_size=16,
            scale=1.0, initial_state=initial.clone(), output_final_state=True)
        peers["fla recurrent"] = (recurrent[0].transpose(1, 2), recurrent[1])
        peers["fla chunk"] = (chunk[0].transpose(1, 2), chunk[1])
    # as test_delta_forms_agree, in fla's chunks of 16 (and √F, one rounding more)
    terms = delta_terms(45, 8, chunk=16) + 1
    magnitude = delta_magnitude(v, strength, initial)
    for form, (out, state) in peers.items():
        expected = (prefix, prefix_state) if form == "fla chunkwise" else (exact, exact_state)
        assert_fp32_close(out, expected[0], terms, magnitude, f"{form} {gate}: out")
        assert_fp32_close(state, expected[1], terms, magnitude, f"{form} {gate}: final state")


# ---------------------------------------------------------------------------------------
# the module: one pass = token by token, with beam reorders; never the fused path


def delta_module(gate, feature_map="fourier", chunk_size=8, seed=3):
    torch.manual_seed(seed)
    module = RandomFeatureCausalAttention(16, 2, 8, seed=11, gate=gate, feature_map=feature_map, learned_tau=True,
                                          chunk_size=chunk_size, update="delta").eval()
    with torch.no_grad():
        module.tau.copy_(torch.tensor([0.7, 1.3]))
        if module.gate_proj is not None:  # gates that decay noticeably
            module.gate_proj.bias.fill_(0.0)
    return module


def module_terms(module, time):
    """The module's longest accumulation: the input projection (embed_dim), q's and k's unit
    vectors and random projections (2 x head_dim), the delta rule in chunks (:func:`delta_terms`,
    over the features: its unit vectors add F) and the output projection (embed_dim)."""
    return 2 * module.embed_dim + 2 * module.head_dim + module.features + \
        delta_terms(time, module.features, min(module.chunk_size, time))


def decode_with_reorders(module, x, tokens, padding, generator):
    """Decode ``x`` [time, batch, embed] one token at a time, reordering the rows after every step
    as beam search does (rows chosen at random, with repeats). Returns the outputs and the inputs,
    tokens and padding of each row's history as the reorders left them: row r's outputs belong to
    the history of row r."""
    state, outputs = {}, []
    history = {"x": x.clone(), "tokens": tokens.clone(), "padding": padding.clone()}
    for t in range(x.size(0)):
        module.hand_in(sentence_starts=sentence_starts(history["tokens"][:, max(0, t - 1):t + 1], SEP)[:, -1:])
        step_x = history["x"][t:t + 1]
        out, _ = module(step_x, step_x, step_x, incremental_state=state,
                        key_padding_mask=history["padding"][:, t:t + 1])
        outputs.append(out)
        order = torch.randint(0, x.size(1), (x.size(1),), generator=generator)
        module.reorder_incremental_state(state, order)
        # what came before follows its row; the next tokens are each row's own
        outputs = [o[:, order] for o in outputs]
        for name, tensor in history.items():
            past, future = (tensor[:t + 1], tensor[t + 1:]) if name == "x" else (tensor[:, :t + 1], tensor[:, t + 1:])
            history[name] = torch.cat([past[:, order], future], 0) if name == "x" else \
                torch.cat([past[order], future], 1)
    module.hand_in()
    return torch.cat(outputs, 0), history, state


@pytest.mark.parametrize("gate", MODEL_GATES)
@pytest.mark.parametrize("feature_map", ["fourier", "positive"])
def test_delta_module_decodes_token_by_token_as_its_one_pass_through_beam_reorders(gate, feature_map):
    """23 tokens (chunks of 8: not whole), three rows with padding and several sentences, reordered
    after every step: each row's outputs are those of one pass over its history."""
    module = delta_module(gate, feature_map)
    generator = torch.Generator().manual_seed(5)
    tokens = random_windows(3, 23, [4, 1, 3], generator, pad_lengths=[23, 17, 20])
    x = torch.randn(23, 3, 16, generator=generator)
    with torch.no_grad():
        steps, history, state = decode_with_reorders(module, x, tokens, tokens.eq(PAD), generator)
        module.hand_in(sentence_starts=sentence_starts(history["tokens"], SEP))
        full, _ = module(history["x"], history["x"], history["x"], key_padding_mask=history["padding"])
        module.hand_in()
    buffer = module._get_input_buffer(state)
    assert buffer["delta_state"].shape == (3, 2, module.features, 8) and buffer.get("keys") is None
    assert_fp32_close(steps, full, module_terms(module, 23), name=f"delta module {gate} {feature_map}: "
                                                                  "one pass-token by token")


def test_delta_module_writes_nothing_at_padding():
    """A padded token leaves the decoding state as it was (α = 1, b = 0), whatever its input and
    gate; the same token unpadded writes."""
    module = delta_module("token")
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(6, 1, 16, generator=generator)
    tokens = torch.full((1, 6), 5)
    padding = torch.zeros(1, 6, dtype=torch.bool)
    padding[0, 3] = True
    with torch.no_grad():
        _, _, state = decode_with_reorders(module, x[:3], tokens[:, :3], padding[:, :3], torch.Generator())
        before = module._get_input_buffer(state)["delta_state"].clone()
        module(x[3:4], x[3:4], x[3:4], incremental_state=state, key_padding_mask=padding[:, 3:4])
        after = module._get_input_buffer(state)["delta_state"]
    assert torch.equal(after, before)
    # and without the padding the same token does write
    with torch.no_grad():
        module(x[3:4], x[3:4], x[3:4], incremental_state=state, key_padding_mask=torch.zeros(1, 1, dtype=torch.bool))
    assert (module._get_input_buffer(state)["delta_state"] - before).abs().max() > 1e-3


class CudaTensor:
    """What the choice of a decoding path reads of a tensor, as a CUDA tensor without a gradient
    has it (the stub of tests/test_rfa_fused.py, which cannot be imported here: that file skips
    itself where Triton is not installed, and this test must run there)."""

    is_cuda, requires_grad = True, False


def test_the_delta_rule_never_takes_the_fused_decoding_path(monkeypatch):
    """The fused kernels add to the state: a delta-rule module decodes eagerly on every path, on
    CUDA with Triton too, and its outputs with the path set to "fused" are the eager ones (on this
    machine, without Triton, a fused step could not even start)."""
    monkeypatch.setattr("rfa_doc_mt.modules.random_feature_attention.fused.triton_available", lambda: True)
    module = delta_module("sgate")
    x = torch.randn(9, 2, 16, generator=torch.Generator().manual_seed(7))
    tokens = random_windows(2, 9, 2, torch.Generator().manual_seed(8))
    padding = tokens.eq(PAD)
    outputs = {}
    for path in ("eager", "fused", "auto"):
        set_decoding_path(module, path)
        assert not uses_fused_decoding(module, x) and not uses_fused_decoding(module, CudaTensor())
        with torch.no_grad():
            outputs[path], _, _ = decode_with_reorders(module, x, tokens, padding, torch.Generator().manual_seed(9))
    assert torch.equal(outputs["fused"], outputs["eager"]) and torch.equal(outputs["auto"], outputs["eager"])
    # the additive module of the same settings would take the fused path on CUDA
    additive = RandomFeatureCausalAttention(16, 2, 8, seed=11, gate="sgate")
    assert uses_fused_decoding(additive, CudaTensor())


# ---------------------------------------------------------------------------------------
# the model: --rfa-update delta


def delta_model_terms(model, source, target):
    """rfa_model_terms with each decoder layer's causal attention summed as the delta rule does
    (:func:`delta_terms`, in chunks of up to the module's chunk length)."""
    causal = model.decoder.layers[0].self_attn
    extra = delta_terms(target, causal.features, min(causal.chunk_size, target))
    return rfa_model_terms(model, source, target) + len(model.decoder.layers) * extra


@pytest.mark.parametrize("gate", MODEL_GATES)
def test_a_tiny_model_with_the_delta_rule_trains_and_decodes_as_one_pass(gate):
    """``--arch rfa_doc_transformer_tiny --rfa-update delta``: every causal attention follows the
    delta rule (cross attention adds, as before); a training step reaches every parameter of it,
    β's included; token-by-token decoding with beam reorders gives the logits of one pass."""
    model, _ = tiny_model(gate, extra=["--rfa-update", "delta"])
    for layer in model.decoder.layers:
        assert layer.self_attn.state_update == "delta" and layer.self_attn.beta_proj is not None
        assert layer.encoder_attn.state_update == "add"
    generator = torch.Generator().manual_seed(8)
    src = model_windows(3, 17, 3, generator, lengths=[17, 11, 14])
    target = model_windows(3, 21, 4, generator, lengths=[21, 21, 16])
    prev = torch.cat([torch.full((3, 1), EOS), target[:, :-1]], 1)
    prev[2, 16:] = PAD
    model.train()
    logits, _ = model(src, src.ne(PAD).sum(1), prev)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, ignore_index=PAD)
    loss.backward()
    assert torch.isfinite(loss)
    for name, parameter in model.decoder.layers[0].self_attn.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().max() > 0, name
    model.eval()
    # beam search's reorders move rows within a sentence only (cross attention keeps one summary per
    # sentence): test_beam_search_with_the_delta_rule_... and the module's test reorder them
    with torch.no_grad():
        encoder_out = model.encoder(src, src.ne(PAD).sum(1))
        full, _ = model.decoder(prev, encoder_out)
        state, steps = {}, []
        for t in range(21):
            steps.append(model.decoder(prev[:, :t + 1], encoder_out, incremental_state=state)[0])
            model.decoder.reorder_incremental_state_scripting(state, torch.arange(3))
    real = prev.ne(PAD).unsqueeze(-1)
    assert_fp32_close(torch.cat(steps, 1) * real, full * real, delta_model_terms(model, 17, 21),
                      name=f"delta decoder {gate}: one pass-token by token")


def test_the_delta_rule_refuses_what_it_cannot_update():
    for extra, message in ((["--rfa-gate", "feature"], "gate per head"), (["--rfa-gate", "sgate-avg"], "gate per head"),
                           (["--rfa-attention", "cross"], "leaves softmax")):
        with pytest.raises(ValueError, match=message):
            tiny_model(extra=["--rfa-update", "delta", *extra])
    with pytest.raises(ValueError, match="gate per head"):
        RandomFeatureCausalAttention(16, 2, 8, seed=1, gate="feature", update="delta")
    with pytest.raises(ValueError, match="unknown state update"):
        RandomFeatureCausalAttention(16, 2, 8, seed=1, update="overwrite")
    model, _ = tiny_model()  # the default: additive RFA, no β
    assert all(layer.self_attn.state_update == "add" and layer.self_attn.beta_proj is None
               for layer in model.decoder.layers)
