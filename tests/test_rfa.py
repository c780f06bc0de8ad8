"""Random feature attention with sentential gating (Wu et al. 2022, §3) and the gates of its
successors (a gate per head at every token, Peng et al. 2021 §3.3; a decay per feature, GLA):
the three forms of the ops agree, RFA approximates softmax attention, the gates do what their
papers say, and the model decodes incrementally exactly as it runs in one pass."""

import importlib.util
import math
import os

import pytest
import torch
from conftest import assert_fp32_close, build_model, low_precision_tolerance, probe_like, transformer_terms
from fairseq import search
from fairseq.sequence_generator import SequenceGenerator

import rfa_doc_mt  # noqa: F401  (registers the task and models)
from rfa_doc_mt.models.build import dictionary_task, toy_dictionary
from rfa_doc_mt.modules.random_feature_attention import (
    NORMALISER_FLOOR,
    RandomFeatureCausalAttention,
    RandomFeatureCrossAttention,
    RandomMatrices,
    causal_decoding_step,
    causal_rfa_step,
    cheapest_chunk_size,
    chunked_causal_rfa,
    cross_rfa,
    cross_rfa_read,
    cross_rfa_state,
    cross_rfa_summary,
    feature_gates,
    final_key_weights,
    incremental_causal_rfa,
    orthogonal_random_matrices,
    positive_random_features,
    random_fourier_features,
    reference_causal_rfa,
    reference_cross_rfa,
    sentence_gates,
    split_state,
    token_gates,
)
from rfa_doc_mt.modules.random_feature_attention import features as rfa_features
from rfa_doc_mt.modules.random_feature_attention import layers as rfa_layers
from rfa_doc_mt.modules.random_feature_attention import training as rfa_training
from rfa_doc_mt.modules.random_feature_attention.features import (
    MIN_TAU,
    DecodingFeatureMap,
    feature_map_function,
    projection_of,
    unit_vectors,
)
from rfa_doc_mt.modules.random_feature_attention.state import (
    column_major_state,
    is_column_major,
    normalised,
    select_rows,
    state_readout,
)
from rfa_doc_mt.modules.random_feature_attention.training import (
    fourier_keys_numerator,
    keys_form_is_cheaper,
    keys_readout,
)
from rfa_doc_mt.modules.sentences import sentence_ids, sentence_starts

PAD, EOS, SEP = 1, 2, 3
GATES = ["none", "sgate", "sgate-avg", "token", "feature"]
SENTENCE_GATES = ["sgate", "sgate-avg"]
# the ops' tests take the feature gate at τ = 1 (GLA's 16 keeps α near 1): decays strong enough
# that an error in them would show
OP_FEATURE_TEMPERATURE = 1.0


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors (conftest.one_thread)


def max_diff(a, b):
    return (a.float() - b.float()).abs().max().item()


def decay_terms(time, log_forget):
    """Terms behind a gate decay exp(C_t - C_i), C the cumulative sum of log f over ``time``
    tokens: the exponent's rounding error is time·u·max|C|, and exp turns it into a relative
    error of the same size, so a decay counts ``time · max|C|`` terms of size 1. ``log_forget``
    [batch, heads, time] or, per feature, [batch, heads, time, F]."""
    if log_forget is None:
        return 0
    return int(time * max(1.0, log_forget.detach().sum(2).abs().max().item()))


def causal_module_terms(module, time):
    """Longest accumulation of a causal or cross RFA module's output: the input projection
    (embed_dim), the L2 norm and the random projection of q and k (2 x head_dim), the dot
    products over the features, the sum over ``time`` keys and the output projection (embed_dim)."""
    return 2 * module.embed_dim + 2 * module.head_dim + module.features + time


def random_windows(batch, time, sentences, generator, pad_lengths=None):
    """[batch, time] token ids with separators at random places (``sentences`` per row) and
    right padding after ``pad_lengths[b]`` tokens."""
    tokens = torch.randint(4, 40, (batch, time), generator=generator)
    lengths = pad_lengths or [time] * batch
    for b in range(batch):
        count = sentences[b] if isinstance(sentences, (list, tuple)) else sentences
        if count > 1:
            cuts = torch.randperm(lengths[b] - 2, generator=generator)[:count - 1] + 1
            tokens[b, cuts] = SEP
        tokens[b, lengths[b]:] = PAD
    return tokens


def op_inputs(batch=2, heads=3, time=37, features=8, dv=5, sentences=(3, 1), gate="sgate", pad_lengths=None,
              seed=0, logit_scale=1.0, logit_bias=0.0):
    generator = torch.Generator().manual_seed(seed)
    tokens = random_windows(batch, time, list(sentences), generator, pad_lengths)
    padding = tokens.eq(PAD)
    phi_q = torch.randn(batch, heads, time, features, generator=generator)
    phi_k = torch.randn(batch, heads, time, features, generator=generator).abs()  # keep masses positive
    phi_q = phi_q.abs()
    v = torch.randn(batch, heads, time, dv, generator=generator)
    # the feature gate's logits: one per feature
    logit_shape = (batch, heads, time) + ((features,) if gate == "feature" else ())
    logits = torch.randn(logit_shape, generator=generator) * logit_scale + logit_bias
    return dict(tokens=tokens, padding=padding, phi_q=phi_q, phi_k=phi_k, v=v, logits=logits, gate=gate)


def gates_of(inputs, logits):
    """log_forget and key_weight of ``inputs["gate"]`` from ``logits`` (:mod:`.gates`)."""
    padding = inputs["padding"] if inputs["padding"].any() else None
    if inputs["gate"] == "token":
        return token_gates(logits, padding)
    if inputs["gate"] == "feature":
        return feature_gates(logits, OP_FEATURE_TEMPERATURE, padding)
    return sentence_gates(logits, sentence_starts(inputs["tokens"], SEP), inputs["gate"], padding)


# ---------------------------------------------------------------------------------------
# feature maps


def softmax_attention(q, k, v, tau):
    q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    return torch.softmax(q @ k.transpose(-1, -2) / tau ** 2, dim=-1) @ v


# positive features have variance growing like exp(4/τ²): they are tested at a flatter τ
@pytest.mark.parametrize("feature_map,tau", [(random_fourier_features, 0.5), (positive_random_features, 0.8)])
def test_rfa_approximates_softmax_and_error_falls_with_more_features(feature_map, tau):
    generator = torch.Generator().manual_seed(0)
    heads, head_dim, time = 2, 8, 24
    q = torch.randn(4, heads, time, head_dim, generator=generator)
    k = q[:, :, torch.randperm(time, generator=generator)] + 0.5 * torch.randn(4, heads, time, head_dim,
                                                                                 generator=generator)
    v = torch.randn(4, heads, time, 6, generator=generator)
    exact = softmax_attention(q, k, v, tau)
    distance_from_uniform = (exact - v.mean(-2, keepdim=True)).abs().mean().item()
    assert distance_from_uniform > 0.1
    errors = {}
    for projections in (8, 64, 512, 4096):
        error = 0.0
        for draw in range(3):
            matrix = orthogonal_random_matrices(torch.Generator().manual_seed(draw), 1, heads, projections,
                                                head_dim)[0]
            tau_tensor = torch.full((heads,), tau)
            approx, _ = reference_cross_rfa(feature_map(q, matrix, tau_tensor), feature_map(k, matrix, tau_tensor), v)
            error += (approx - exact).abs().mean().item() / 3
        errors[projections] = error
    print(f"{feature_map.__name__}: mean abs error by projections {errors}")
    assert errors[8] > errors[64] > errors[512] > errors[4096]
    assert errors[4096] < distance_from_uniform / 4


@pytest.mark.parametrize("per_head", [True, False], ids=["one head at a time", "all heads at once"])
def test_fourier_features_and_their_gradients_follow_the_formula(monkeypatch, per_head):
    """The feature map's own backward (from its output) against autograd through sin and cos,
    for the input and a learned τ: one head at a time (a CPU's form) and every head at once (a GPU's)."""
    monkeypatch.setattr(rfa_features, "PER_HEAD_FEATURES", {"cpu"} if per_head else set())
    generator = torch.Generator().manual_seed(3)
    heads, head_dim, projections = 2, 8, 16
    matrix = orthogonal_random_matrices(generator, 1, heads, projections, head_dim)[0]
    x = (2 * torch.randn(3, heads, 5, head_dim, generator=generator)).requires_grad_()
    tau = torch.tensor([0.7, 1.3], requires_grad=True)
    features = random_fourier_features(x, matrix, tau)
    angles = torch.einsum("bhtd,hkd->bhtk", torch.nn.functional.normalize(x, dim=-1), matrix / tau.view(-1, 1, 1))
    formula = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1) / projections ** 0.5
    # angles: head_dim products of size |w|/τ (the values of sin and cos are at most 1)
    angle_size = (matrix.norm(dim=-1).max() / tau.min()).item()
    assert_fp32_close(features, formula, head_dim, angle_size, "fourier features vs formula")
    weights = torch.randn(features.shape, generator=generator)
    grads = [torch.autograd.grad((out * weights).sum(), (x, tau)) for out in (formula, features)]
    for name, want, got in zip(("x", "tau"), *grads):
        # the backward sums 2 x projections terms into each angle's gradient and, through the
        # angles, head_dim (x) or projections x time x batch (τ) more, each of the angle's size
        terms = 2 * projections + (head_dim if name == "x" else projections * x.numel() // head_dim)
        assert_fp32_close(got, want, terms, angle_size * weights.abs().max().item(), f"gradient of {name}")


def test_unit_vectors_and_their_gradient_follow_x_over_its_norm():
    """The unit vectors' own backward against autograd through x / max(|x|, 1e-6), from a permuted
    input, with one zero vector and one whose norm is below the floor (its gradient is g / 1e-6:
    no component along the vector is removed)."""
    generator = torch.Generator().manual_seed(5)
    head_dim = 16
    x = 3 * torch.randn(4, 6, head_dim, generator=generator)
    x[1, 2] = 0.0
    x[2, 3] *= 1e-7 / x[2, 3].norm()  # below the floor: units of norm 0.1
    x = x.permute(1, 0, 2).requires_grad_()
    units = unit_vectors(x)
    assert units.is_contiguous() and units.shape == x.shape
    expected = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    # one division of a norm summed over head_dim squares
    assert_fp32_close(units, expected, head_dim + 2, 1.0, "unit vectors")
    weights = torch.randn(units.shape, generator=generator)
    want, got = (torch.autograd.grad((u * weights).sum(), x)[0] for u in (expected, units))
    floored = x.detach().norm(dim=-1) < 1e-6
    assert int(floored.sum()) == 2
    # regular rows: (g - u (u·g)) / |x|, a head_dim sum of terms of size |g| / |x|
    size = weights.abs().max().item() / x.detach().norm(dim=-1)[~floored].min().item()
    assert_fp32_close(got[~floored], want[~floored], 2 * head_dim + 4, size, "gradient, regular rows")
    assert_fp32_close(got[floored], want[floored], 2, weights.abs().max().item() * 1e6, "gradient, floored rows")
    assert torch.allclose(want[floored], weights[floored] / 1e-6)


def test_the_projection_by_a_learned_tau_and_its_gradient_follow_w_over_clamped_tau():
    """W / max(τ, MIN_TAU) with its own backward against autograd through the division and the
    clamp (float64): the projection, and the gradients of τ (0 for a τ below the clamp) and of W."""
    generator = torch.Generator().manual_seed(8)
    matrix = torch.randn(3, 6, 4, generator=generator, dtype=torch.float64).requires_grad_()
    tau = torch.tensor([0.7, MIN_TAU / 5, 1.3], dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 6, 4, generator=generator, dtype=torch.float64)
    expected = matrix / tau.clamp_min(MIN_TAU).view(-1, 1, 1)
    got = projection_of(matrix, tau)
    assert type(got.grad_fn).__name__ != "DivBackward0"  # its own backward
    assert torch.allclose(got, expected, rtol=1e-15, atol=0)
    want, have = (torch.autograd.grad((p * weights).sum(), (matrix, tau)) for p in (expected, got))
    assert float(have[1][1]) == 0.0 and float(have[1][0]) != 0.0  # clamped: no gradient
    for name, w, h in zip(("W", "tau"), want, have):
        # a sum of 24 products of size |g| |W| / τ² (float64)
        assert torch.allclose(h, w, rtol=1e-12, atol=1e-12), name


def test_normalised_and_its_gradient_follow_the_division_by_the_floored_mass():
    """The readout's normalisation n / max(m, floor) with its own backward against autograd through
    the slices, the clamp and the division (float64), with masses above and below the floor: the
    output and the gradient of the joined [n, m] (0 for the masses the floor holds)."""
    generator = torch.Generator().manual_seed(9)
    joined = torch.randn(2, 3, 5, 7, generator=generator, dtype=torch.float64)
    joined[..., -1] = 0.05 + 2 * torch.rand(2, 3, 5, generator=generator, dtype=torch.float64)
    below = joined[..., -1] < NORMALISER_FLOOR
    assert 0 < int(below.sum()) < below.numel()
    joined.requires_grad_()
    weights = torch.randn(2, 3, 5, 6, generator=generator, dtype=torch.float64)
    expected = joined[..., :-1] / joined[..., -1:].clamp_min(NORMALISER_FLOOR)
    got = normalised(joined)
    assert type(got.grad_fn).__name__ != "DivBackward0"  # its own backward
    assert torch.allclose(got, expected, rtol=1e-15, atol=0)
    want, have = (torch.autograd.grad((o * weights).sum(), joined)[0] for o in (expected, got))
    assert (have[..., -1][below] == 0).all() and (have[..., -1][~below] != 0).all()
    # six products of size |g| |n| / m² summed into each mass's gradient (float64)
    assert torch.allclose(have, want, rtol=1e-12, atol=1e-12)


def test_keys_read_one_head_at_a_time_equals_the_two_step_form():
    """Cross attention's training read through the keys with the Fourier map, its features made
    and used one head at a time (fourier_keys_numerator, with its own backward), against the
    layer's features followed by keys_readout: values and the gradients of queries, keys,
    weighted values and a learned τ."""
    generator = torch.Generator().manual_seed(6)
    heads, head_dim, projections, batch, time, source = 2, 8, 16, 3, 5, 7
    matrix = orthogonal_random_matrices(generator, 1, heads, projections, head_dim)[0]
    tau = torch.tensor([0.7, 1.3], requires_grad=True)
    q = (2 * torch.randn(batch, heads, time, head_dim, generator=generator)).requires_grad_()
    k = (2 * torch.randn(batch, heads, source, head_dim, generator=generator)).requires_grad_()
    values = torch.randn(batch, heads, source, head_dim + 1, generator=generator).requires_grad_()
    two_step = keys_readout(random_fourier_features(q, matrix, tau), random_fourier_features(k, matrix, tau), values)
    fused = fourier_keys_numerator(unit_vectors(q.transpose(0, 1)), unit_vectors(k.transpose(0, 1)),
                                   values.transpose(0, 1), projection_of(matrix, tau)).transpose(0, 1)
    assert fused.shape == two_step.shape == (batch, heads, time, head_dim + 1)
    # a score sums 2 x projections feature products (each 1/D-sized, angles of size |w|/τ from
    # head_dim products), a numerator source scores times values
    angle_size = (matrix.norm(dim=-1).max() / tau.min()).item()
    size = angle_size * values.abs().max().item()
    assert_fp32_close(fused, two_step, head_dim + 2 * projections + source, size, "numerator")
    weights = torch.randn(two_step.shape, generator=generator)
    inputs = (q, k, values, tau)
    want, got = (torch.autograd.grad((out * weights).sum(), inputs) for out in (two_step, fused))
    size *= weights.abs().max().item()
    for name, expected, actual in zip(("q", "k", "values", "tau"), want, got):
        # through the scores (time or source of them, 2 x projections features each) into the
        # angles (head_dim), and for τ summed over every query and key of the batch
        terms = 2 * projections + head_dim + time + source
        if name == "tau":
            terms += projections * batch * (time + source)
        assert_fp32_close(actual, expected, terms, size, f"gradient of {name}")


@pytest.mark.parametrize("name", ["fourier", "positive"])
def test_decoding_feature_map_equals_the_training_form(name):
    """Decoding's feature map (unit vectors laid out head-major, one batched product over heads,
    DecodingFeatureMap) against the training form, for values and gradients, with learned τ."""
    generator = torch.Generator().manual_seed(4)
    heads, head_dim, projections, batch, time = 2, 8, 16, 3, 5
    matrix = orthogonal_random_matrices(generator, 1, heads, projections, head_dim)[0]
    tau = torch.tensor([0.6, 1.4])
    x = (2 * torch.randn(batch, heads, time, head_dim, generator=generator)).requires_grad_()
    training = feature_map_function(name)(x, matrix, tau)
    feature_map = DecodingFeatureMap.build(name, matrix, tau)
    units = unit_vectors(x.permute(1, 0, 2, 3)).view(heads, -1, head_dim)
    decoding = feature_map(units).view(heads, batch, time, -1).transpose(0, 1)
    with torch.no_grad():  # the in-place form decoding runs
        in_place = feature_map(unit_vectors(x.permute(1, 0, 2, 3)).view(heads, -1, head_dim))
    assert torch.equal(in_place.view(heads, batch, time, -1).transpose(0, 1), decoding)
    # angles (exponents): head_dim products of size |w|/τ, plus the offset's own rounding for the
    # positive map, whose features carry the exponent's error times their own size
    angle_size = (matrix.norm(dim=-1).max() / tau.min()).item()
    magnitude = angle_size * (1.0 if name == "fourier" else training.abs().max().item())
    assert_fp32_close(decoding, training, head_dim + 2, magnitude, f"{name}: decoding vs training features")
    weights = torch.randn(training.shape, generator=generator)
    grads = [torch.autograd.grad((out * weights).sum(), x)[0] for out in (training, decoding)]
    # as in the test above: 2 x projections terms into each angle's gradient, then head_dim
    assert_fp32_close(grads[1], grads[0], 2 * projections + head_dim + 2,
                      magnitude * weights.abs().max().item(), f"{name}: gradient of x")


def test_readouts_agree_in_either_product_order():
    """Decoding keeps its states column-major and reads the keys form with the keys as the left
    operand when there are fewer queries than keys: the same sums as the plain products, and the
    layout survives row selection (beam reorders, compaction)."""
    generator = torch.Generator().manual_seed(14)
    phi_q = torch.randn(3, 2, 4, 16, generator=generator).abs()
    state = torch.randn(3, 2, 16, 9, generator=generator)
    stored = column_major_state(state.transpose(-1, -2).contiguous())
    assert is_column_major(stored) and not is_column_major(state) and torch.equal(stored, state)
    assert_fp32_close(state_readout(phi_q, stored), phi_q @ state, 16, name="column-major state readout")
    keys, values = torch.randn(3, 2, 7, 16, generator=generator).abs(), torch.randn(3, 2, 7, 9, generator=generator)
    # 4 queries, 7 keys: the transposed order; both sums of 16 and then 7 terms
    assert_fp32_close(keys_readout(phi_q, keys, values), (phi_q @ keys.transpose(-1, -2)) @ values, 16 + 7,
                      (phi_q.max() * keys.max() * 16 * values.abs().max()).item(), "keys readout, few queries")
    rows = torch.tensor([2, 0, 0])
    selected = select_rows(stored, rows)
    assert is_column_major(selected) and torch.equal(selected, state[rows])
    spare = column_major_state(torch.empty(3, 2, 9, 16))
    written = select_rows(stored, rows, out=spare)
    assert is_column_major(written) and written.data_ptr() == spare.data_ptr() and torch.equal(written, state[rows])


def test_orthogonal_random_matrices_are_seeded_and_orthogonal_in_blocks():
    a = orthogonal_random_matrices(torch.Generator().manual_seed(5), 2, 3, 20, 8)
    b = orthogonal_random_matrices(torch.Generator().manual_seed(5), 2, 3, 20, 8)
    c = orthogonal_random_matrices(torch.Generator().manual_seed(6), 2, 3, 20, 8)
    assert a.shape == (2, 3, 20, 8) and torch.equal(a, b) and not torch.equal(a, c)
    block = torch.nn.functional.normalize(a[0, 0, :8], dim=-1)
    # fp32 rows (drawn in fp64, rounded once), normalised (8 terms) and multiplied (8 terms)
    assert_fp32_close(block @ block.T, torch.eye(8), terms=16, magnitude=1.0, name="orthogonal blocks")


# ---------------------------------------------------------------------------------------
# causal RFA: reference = training (chunked) = incremental


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("time,chunk_size,sentences,pad_lengths", [
    (1, 4, (1, 1), None),
    (37, 8, (3, 1), [37, 30]),        # not a multiple of the chunk; padding
    (64, 16, (15, 2), None),          # exactly 4 chunks, 15 sentences
    (101, 32, (7, 12), [90, 101]),
])
def test_causal_forms_agree(gate, time, chunk_size, sentences, pad_lengths, monkeypatch):
    inputs = op_inputs(time=time, sentences=sentences, gate=gate, pad_lengths=pad_lengths, seed=time)
    leaves = {name: inputs[name].clone().requires_grad_() for name in ("phi_q", "phi_k", "v", "logits")}

    def run(form):
        log_forget, key_weight = gates_of(inputs, leaves["logits"])
        return form(leaves["phi_q"], leaves["phi_k"], leaves["v"], log_forget, key_weight)

    ref_out, ref_state = run(reference_causal_rfa)
    chunk_out, chunk_state = run(lambda *a: chunked_causal_rfa(*a, chunk_size=chunk_size))
    # a training step needs no final state: the same outputs, and no state built after the last chunk
    outputs_only, no_state = run(lambda *a: chunked_causal_rfa(*a, chunk_size=chunk_size, final_state=False))
    assert no_state is None and torch.equal(outputs_only, chunk_out)
    inc_out, inc_state = run(incremental_causal_rfa)
    others = [(chunk_out, chunk_state, "chunked"), (inc_out, inc_state, "incremental")]
    if gate == "feature":  # the chunks by halving too (taken where a chunk decays by more than e^-60)
        with monkeypatch.context() as patch:
            patch.setattr(rfa_training, "FACTORED_DECAY_LIMIT", -1.0)
            others.append(run(lambda *a: chunked_causal_rfa(*a, chunk_size=chunk_size)) + ("chunked by halving",))
    real = ~inputs["padding"].unsqueeze(1).unsqueeze(-1)  # outputs at padded queries are never used
    name = f"causal {gate} T={time} chunk={chunk_size}"
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    decays = decay_terms(time, log_forget)
    # out = Σ_i w_ti v_i / Σ_i w_ti with w ≥ 0 (positive features): terms of size max|v|, summed
    # over the features (w) and the keys, times the decays
    out_terms, magnitude = inputs["phi_q"].size(-1) + time + decays, inputs["v"].abs().max().item()
    for other, _, form in others:
        assert_fp32_close(other * real, ref_out * real, out_terms, magnitude, f"{name} out reference-{form}")
    # the final state sums `time` decayed terms φ(k_i)·v_i: their size is S of |v|
    _, abs_state = reference_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"].abs(), log_forget, key_weight)
    abs_S = split_state(abs_state)[0]
    ref_S, ref_z = split_state(ref_state)
    for _, got, form in others:
        S, z = split_state(got)
        assert_fp32_close(S, ref_S, time + decays, abs_S.max().item(), f"{name} final S reference-{form}")
        assert_fp32_close(z, ref_z, time + decays, ref_z.max().item(), f"{name} final z reference-{form}")
    # gradients of the two differentiable forms (through gates, features and values): the
    # backward pass runs the forward sums again, transposed, and sums over the values (dv)
    weights = torch.randn_like(ref_out) * real
    grads = []
    chunked_forms = [(out, state, form) for out, state, form in others if form.startswith("chunked")]
    for out, state, _ in [(ref_out, ref_state, "reference")] + chunked_forms:
        loss = (out * weights).sum() + 0.1 * state.sum()
        grads.append(torch.autograd.grad(loss, list(leaves.values()), allow_unused=True, retain_graph=True))
    gradient_terms = 2 * (out_terms + inputs["v"].size(-1))
    # The largest gradient can be a cancellation (none at all where out_t = v_t whatever φ and the
    # gates, e.g. T = 1), so the size of the terms is taken from the arithmetic where it can exceed
    # it. With w_ti = φ(q_t)·φ(k_i) c_i D_ti ≥ 0 and M_t = Σ_i w_ti, ∂out_t/∂φ(q_t)_f sums
    # φ(k_i)_f c_i D_ti (v_i - out_t) g_t / M_t, terms of at most (|v| + |out|) |g| / φ(q_t)_f
    # (M_t ≥ φ(q_t)_f φ(k_i)_f c_i D_ti): φ(q)'s gradient is compared times φ(q), and φ(k)'s times
    # φ(k) (with the state's terms, 0.1 φ(k) c D [v, 1]). A gate logit's terms are a pair's
    # w_ti (v_i - out_t) g_t / M_t times ∂log(c D)/∂x, at most 1 (σ' / σ, and 1/τ with τ ≥ 1).
    pair = weights.abs().max().item() * (inputs["v"].abs().max().item() + ref_out.detach().abs().max().item())
    k_state = 0.1 * inputs["phi_k"].max().item() * (inputs["v"].size(-1) * inputs["v"].abs().max().item() + 1)
    scaled_by = {"phi_q": inputs["phi_q"], "phi_k": inputs["phi_k"]}
    sizes = {"phi_q": pair, "phi_k": pair + k_state, "logits": pair}
    for leaf, reference, *chunked in zip(leaves, *grads):
        if reference is None:
            continue
        scale = scaled_by.get(leaf, 1.0)
        magnitude = max((reference * scale).abs().max().item(), sizes.get(leaf, 0.0))
        for got, (_, _, form) in zip(chunked, chunked_forms):
            assert_fp32_close(got * scale, reference * scale, gradient_terms, magnitude,
                              name=f"{name} gradient of {leaf} reference-{form}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gate", GATES)
def test_causal_forms_agree_on_reduced_precision_inputs(gate, dtype):
    """Features may arrive in bf16/fp16 (autocast, --fp16): the ops compute in fp32 and agree."""
    inputs = op_inputs(time=45, sentences=(5, 2), gate=gate, pad_lengths=[45, 40], seed=1)
    log_forget, key_weight = gates_of(inputs, inputs["logits"].to(dtype))
    low = [inputs[name].to(dtype) for name in ("phi_q", "phi_k", "v")]
    ref_out, _ = reference_causal_rfa(*low, log_forget, key_weight)
    chunk_out, _ = chunked_causal_rfa(*low, log_forget, key_weight, chunk_size=16)
    inc_out, _ = incremental_causal_rfa(*low, log_forget, key_weight)
    assert ref_out.dtype == chunk_out.dtype == inc_out.dtype == torch.float32
    real = ~inputs["padding"].unsqueeze(1).unsqueeze(-1)
    name = f"causal {gate} {dtype} inputs"
    # the same fp32 arithmetic as test_causal_forms_agree, on inputs rounded to {dtype}
    terms = inputs["phi_q"].size(-1) + 45 + decay_terms(45, log_forget)
    magnitude = low[2].float().abs().max().item()
    assert_fp32_close(chunk_out * real, ref_out * real, terms, magnitude, f"{name} reference-chunked")
    assert_fp32_close(inc_out * real, ref_out * real, terms, magnitude, f"{name} reference-incremental")
    assert torch.isfinite(ref_out).all()


@pytest.mark.parametrize("gate", GATES)
def test_every_causal_form_continues_from_an_initial_state(gate):
    """The three forms share one signature: run on the first 12 tokens, then on the rest from
    the state the prefix left, each gives what it gives on the whole sequence."""
    inputs = op_inputs(time=30, sentences=(4, 3), gate=gate, pad_lengths=[30, 26], seed=3)
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    sequence = (inputs["phi_q"], inputs["phi_k"], inputs["v"], log_forget, key_weight)

    def part(tensors, span):
        return [None if x is None else x[:, :, span] for x in tensors]

    real = ~inputs["padding"][:, 12:].unsqueeze(1).unsqueeze(-1)
    # as test_causal_forms_agree: features, 30 keys, their decays; terms of size max|v|
    terms = inputs["phi_q"].size(-1) + 30 + decay_terms(30, log_forget)
    _, abs_state = reference_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"].abs(), log_forget, key_weight)
    forms = {"reference": reference_causal_rfa, "chunked": lambda *a, **k: chunked_causal_rfa(*a, **k, chunk_size=8),
             "incremental": incremental_causal_rfa}
    for name, form in forms.items():
        full_out, full_state = form(*sequence)
        _, prefix_state = form(*part(sequence, slice(None, 12)))
        prefix_copy = prefix_state.clone()
        out, state = form(*part(sequence, slice(12, None)), initial_state=prefix_state)
        assert torch.equal(prefix_state, prefix_copy), f"{name} changed the initial state it was given"
        assert_fp32_close(out * real, full_out[:, :, 12:] * real, terms, inputs["v"].abs().max().item(),
                          f"{gate} {name}: continued = whole")
        assert_fp32_close(state, full_state, 30 + decay_terms(30, log_forget), abs_state.abs().max().item(),
                          f"{gate} {name}: final state continued = whole")


def test_causal_step_continues_a_chunked_prefix():
    inputs = op_inputs(time=20, sentences=(2, 4), gate="sgate-avg")
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    full, _ = chunked_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"], log_forget, key_weight)
    _, prefix_state = chunked_causal_rfa(*(x[:, :, :12] for x in (inputs["phi_q"], inputs["phi_k"], inputs["v"])),
                                         log_forget[..., :12], key_weight[..., :12])
    out, _ = causal_rfa_step(inputs["phi_q"][:, :, 12], inputs["phi_k"][:, :, 12], inputs["v"][:, :, 12],
                             prefix_state, log_forget[..., 12].exp(), key_weight[..., 12])
    # as test_causal_forms_agree: features, 13 keys, their decays; terms of size max|v|
    terms = inputs["phi_q"].size(-1) + 13 + decay_terms(13, log_forget[..., :13])
    assert_fp32_close(out, full[:, :, 12], terms, inputs["v"].abs().max().item(), "step after chunked prefix")


# ---------------------------------------------------------------------------------------
# gates (§3.2)


def test_gate_values_follow_the_paper():
    tokens = torch.tensor([[EOS, 5, SEP, 6, 7, SEP, 8, PAD]])
    logits = torch.arange(8.0).view(1, 1, 8)
    log_forget, _ = sentence_gates(logits, sentence_starts(tokens, SEP), "sgate", tokens.eq(PAD))
    expected = torch.ones(8)
    expected[3] = torch.sigmoid(torch.tensor(2.0))  # x_3 starts a sentence: σ(logit of e_2, the separator)
    expected[6] = torch.sigmoid(torch.tensor(5.0))
    # exp(log σ(x)) against σ(x): two elementary functions, each within a few ulps (terms=4)
    assert_fp32_close(log_forget.exp()[0, 0], expected, terms=4, magnitude=1.0, name="sgate values")
    _, key_weight = sentence_gates(logits, sentence_starts(tokens, SEP), "sgate-avg", tokens.eq(PAD))
    assert_fp32_close(key_weight[0, 0], torch.tensor([1, 1, 1, 1 - expected[3], 1 - expected[3], 1 - expected[3],
                                                      1 - expected[6], 0]), terms=4, magnitude=1.0,
                      name="sgate-avg weights")


def _module_pair(gate, seed=3, **kwargs):
    torch.manual_seed(seed)
    module = RandomFeatureCausalAttention(16, 2, 8, seed=11, gate=gate, **kwargs).eval()
    return module


def _run_causal(module, x, tokens, padding=None):
    module.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    out, _ = module(x, x, x, key_padding_mask=padding)
    module.hand_in()
    return out


def _fix_gate(module, logit):
    """Every gate logit of ``module`` set to ``logit``, whatever the input."""
    linear = module.gate_proj if module.feature_gate is None else module.feature_gate.up
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(logit)


@pytest.mark.parametrize("gate", ["sgate", "feature"])
def test_gate_fixed_at_one_equals_ungated(gate):
    """Gates of 1 (the feature gate has no key weight, so α = 1 is ungated RFA)."""
    gated, plain = _module_pair(gate), _module_pair("none")
    plain.load_state_dict(gated.state_dict(), strict=False)
    _fix_gate(gated, 40.0)  # σ(40) = 1 in fp32
    generator = torch.Generator().manual_seed(1)
    tokens = random_windows(2, 30, 5, generator)
    x = torch.randn(30, 2, 16, generator=generator)
    expected = _run_causal(plain, x, tokens)
    # gates of exactly 1 take the gated path's other order of operations (decays, chunk sums)
    assert_fp32_close(_run_causal(gated, x, tokens), expected, causal_module_terms(plain, 30),
                      name=f"{gate} at one")


@pytest.mark.parametrize("gate", ["sgate", "sgate-avg"])
def test_gate_near_zero_sees_only_the_current_sentence(gate):
    module = _module_pair(gate)
    with torch.no_grad():
        module.gate_proj.weight.zero_()
        module.gate_proj.bias.fill_(-40.0)
    generator = torch.Generator().manual_seed(2)
    tokens = random_windows(1, 40, 4, generator)
    x = torch.randn(40, 1, 16, generator=generator)
    out = _run_causal(module, x, tokens)
    ids = sentence_ids(tokens, SEP)[0]
    for sentence in ids.unique():
        positions = (ids == sentence).nonzero().view(-1)
        alone = tokens[:, positions].clone()
        alone[alone == SEP] = 4  # the sentence on its own: no separator, so no gate
        expected = _run_causal(module, x[positions], alone)
        # σ(-40) ≈ 4e-18: what reaches across the gate is far below rounding
        assert_fp32_close(out[positions], expected, causal_module_terms(module, 40), name="gate at zero")


@pytest.mark.parametrize("gate", GATES)
def test_an_example_is_unchanged_by_longer_examples_in_its_batch(gate):
    """The authors' release applied extra gate factors to rows with fewer separators than the
    longest row; here every row is computed on its own."""
    module = _module_pair(gate)
    generator = torch.Generator().manual_seed(4)
    short = random_windows(1, 12, 2, generator)
    longer = random_windows(2, 50, 9, generator)
    batch = torch.full((3, 50), PAD)
    batch[0, :12] = short[0]
    batch[1:] = longer
    x = torch.randn(50, 3, 16, generator=generator)
    alone = _run_causal(module, x[:12, :1], short)
    batched = _run_causal(module, x, batch, batch.eq(PAD))
    assert_fp32_close(batched[:12, 0], alone[:, 0], causal_module_terms(module, 12), name=f"alone vs batched {gate}")


# ---------------------------------------------------------------------------------------
# gates at every token: per head (Peng et al. 2021 §3.3) and per feature (GLA, Yang et al. 2024)


@pytest.mark.parametrize("gate", ["token", "feature"])
def test_every_token_gates_follow_their_papers(gate):
    """token: g_t = σ(w_g·x_t + b_g) per head, key weight 1 - g_t; feature: α_t =
    σ(x_t W_1 W_2 + b)^{1/τ} per head and feature, no key weight; both from the token's own
    input x_t (the sentential gate reads the token before), padding 1 and weight 0."""
    module = _module_pair(gate, gate_temperature=4.0)
    generator = torch.Generator().manual_seed(21)
    x = torch.randn(6, 2, 16, generator=generator)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[0, 5] = True
    log_forget, key_weight = module._gates(x, padding)
    if gate == "token":
        weight, bias = module.gate_proj.weight, module.gate_proj.bias
        logits, sizes = x @ weight.T + bias, x.abs() @ weight.abs().T + bias.abs()
        gates, expected_weight = torch.sigmoid(logits).permute(1, 2, 0), torch.sigmoid(-logits).permute(1, 2, 0)
    else:
        down, up = module.feature_gate.down.weight, module.feature_gate.up
        logits = ((x @ down.T) @ up.weight.T + up.bias).view(6, 2, 2, -1)
        sizes = ((x.abs() @ down.abs().T) @ up.weight.abs().T + up.bias.abs()).view(6, 2, 2, -1)
        gates, expected_weight = torch.sigmoid(logits).pow(1 / 4.0).permute(1, 2, 0, 3), torch.ones(2, 2, 6)
    real = (~padding).unsqueeze(1).expand(2, 2, 6)  # [batch, heads, time]
    # the logits' products in another order (16 inputs, and rank 16 for the feature gate), whose
    # terms have the size of |x||w|, through σ (slope ≤ 1/4) and the power (slope ≤ 1/τ on
    # σ ≤ 1), plus log σ, /τ and exp against σ and pow: a few roundings each
    assert_fp32_close(log_forget.exp()[real], gates[real], 2 * 16 + 8, sizes.max().item(), f"{gate} values")
    assert torch.all(log_forget[~real] == 0.0) and torch.all(key_weight[~real] == 0.0)
    assert_fp32_close(key_weight[real], expected_weight[real], 16 + 4, sizes.max().item(), f"{gate} key weights")
    # the gate of token 3 depends on x_3 and on nothing else
    x = x.clone().requires_grad_()
    gate_of_3 = module._gates(x, None)[0][:, :, 3]
    grad = torch.autograd.grad((gate_of_3 * probe_like(gate_of_3)).sum(), x)[0]
    assert grad[3].abs().max() > 0 and torch.all(grad[torch.arange(6) != 3] == 0)


@pytest.mark.parametrize("gate", ["token", "feature"])
def test_every_token_gate_near_zero_sees_only_its_token(gate):
    """g = σ(-40) ≈ 4e-18 (token; key weight 1 - g = 1) or α = σ(-40)^{1/τ} at τ = 1 (feature):
    nothing reaches the next token, so every output is the module's on that token alone."""
    module = _module_pair(gate, gate_temperature=1.0)
    _fix_gate(module, -40.0)
    generator = torch.Generator().manual_seed(22)
    tokens = random_windows(1, 40, 3, generator)
    x = torch.randn(40, 1, 16, generator=generator)
    out = _run_causal(module, x, tokens)
    alone = torch.cat([_run_causal(module, x[t:t + 1], tokens[:, t:t + 1]) for t in range(40)])
    # what reaches across a gate is 4e-18 of it, far below rounding: one token's terms
    assert_fp32_close(out, alone, causal_module_terms(module, 1), name=f"{gate} gate at zero")


def test_feature_gate_chunks_stay_finite_and_exact_under_strong_decay(monkeypatch):
    """320 tokens, chunks of 64, half the features decaying by e^-5 a token (a gate near 0: e^-320
    over a chunk, whose GLA factors e^{±B} would overflow fp32) and half by e^-0.01 (whose terms
    reach across the whole window): the chunked form takes the halving and stays finite, and its
    outputs, final state and gradients are the reference's."""
    calls = []
    halving = rfa_training._within_chunks_halving
    monkeypatch.setattr(rfa_training, "_within_chunks_halving", lambda *a: calls.append(1) or halving(*a))
    generator = torch.Generator().manual_seed(23)
    time, features = 320, 8
    phi_q, phi_k = (torch.rand(1, 2, time, features, generator=generator) for _ in range(2))
    v = torch.randn(1, 2, time, 5, generator=generator)
    log_forget = torch.full((1, 2, time, features), -0.01)
    log_forget[..., ::2] = -5.0
    leaves = [t.clone().requires_grad_() for t in (phi_q, phi_k, v, log_forget)]
    ref_out, ref_state = reference_causal_rfa(*leaves)
    out, state = chunked_causal_rfa(*leaves, chunk_size=64)
    assert calls and torch.isfinite(out).all() and torch.isfinite(state).all()
    # A pair's decay exp(C_t - C_i) carries the rounding of its feature's cumulative sum, (t - i)
    # roundings of |C| (Higham §3.1): for the strong features (t - i)·|C|·e^{-5 (t - i)} ≤
    # 1600·e^-5 ≈ 11 terms of the term's size, for the weak ones (t - i)·|C| ≤ 320·3.2; with the
    # features and keys summed, terms of size max|v| (test_causal_forms_agree)
    decays = 11 + 1024
    assert_fp32_close(out, ref_out, features + time + decays, v.abs().max().item(), "strong decay: out")
    _, abs_state = reference_causal_rfa(phi_q, phi_k, v.abs(), log_forget)
    assert_fp32_close(state, ref_state, time + decays, abs_state.max().item(), "strong decay: final state")
    weights = probe_like(out)
    grads = [torch.autograd.grad((o * weights).sum() + 0.1 * st.sum(), leaves) for o, st in
             ((ref_out, ref_state), (out, state))]
    for name, want, got in zip(("phi_q", "phi_k", "v", "log_forget"), *grads):
        assert torch.isfinite(got).all(), name
        # as test_causal_forms_agree: the backward runs the sums again, transposed, over the values
        assert_fp32_close(got, want, 2 * (features + time + decays + 5), name=f"strong decay: gradient of {name}")


def _load_fla_naive(path):
    """fla's plain-PyTorch form at ``fla/ops/<path>``, loaded by file: importing the package would
    import its Triton kernels."""
    spec = importlib.util.find_spec("fla")
    if spec is None or importlib.util.find_spec("einops") is None:
        pytest.skip("fla-core (flash-linear-attention) and einops are not installed: pip install -e '.[test]'")
    location = os.path.join(spec.submodule_search_locations[0], "ops", *path.split("/"))
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{path.replace('/', '_')}", location)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("gate", ["token", "feature"])
def test_every_token_gates_equal_flash_linear_attentions_naive_forms(gate):
    """A peer check: the token gate is fla's simple GLA (a scalar decay per head, as gated RFA and
    Mamba-2), the feature gate fla's GLA, on the same features and gates, continuing from a state.

    fla's conventions: [batch, time, heads, dim]; gates in log space (g, gk); q scaled by
    dim^-1/2 (GLA's naive form always: q is given times √F); the state [batch, heads, K, V]; the
    output not normalised. RFA's outputs are its numerator over its normaliser, fla's outputs
    on values [v, 1] with the keys weighted by RFA's key weights (1 - g for the token gate)."""
    naive = _load_fla_naive("simple_gla/naive.py" if gate == "token" else "gla/naive.py")
    inputs = op_inputs(time=45, gate=gate, sentences=(3, 2), pad_lengths=[45, 38], seed=31)
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    phi_q, phi_k, v = inputs["phi_q"], inputs["phi_k"], inputs["v"]
    generator = torch.Generator().manual_seed(32)
    initial = torch.rand(2, 3, phi_q.size(-1), v.size(-1) + 1, generator=generator)
    out, state = reference_causal_rfa(phi_q, phi_k, v, log_forget, key_weight, initial_state=initial)
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    keys = phi_k * key_weight.unsqueeze(-1)

    def fla_layout(x):  # [batch, heads, time, ...] → [batch, time, heads, ...]
        return x.transpose(1, 2).contiguous()

    if gate == "token":
        peers = {"recurrent": naive.naive_recurrent_simple_gla(
            fla_layout(phi_q), fla_layout(keys), fla_layout(values), fla_layout(log_forget), scale=1.0,
            initial_state=initial.clone(), output_final_state=True),
                 "chunk": naive.naive_chunk_simple_gla(
            fla_layout(phi_q), fla_layout(keys), fla_layout(values), fla_layout(log_forget),
            initial_state=initial.clone(), output_final_state=True, chunk_size=16, scale=1.0)}
    else:
        peers = {"recurrent": naive.naive_recurrent_gla(
            fla_layout(phi_q * phi_q.size(-1) ** 0.5), fla_layout(keys), fla_layout(values), fla_layout(log_forget),
            initial_state=initial.clone(), output_final_state=True)}
    real = ~inputs["padding"].unsqueeze(1).unsqueeze(-1)
    decays = decay_terms(45, log_forget)
    # as test_causal_forms_agree (√F rounds once more: one term)
    terms = phi_q.size(-1) + 45 + decays + 1
    _, abs_state = reference_causal_rfa(phi_q, phi_k, v.abs(), log_forget, key_weight, initial_state=initial)
    for form, (peer_out, peer_state) in peers.items():
        peer_out = peer_out.transpose(1, 2)
        peer = peer_out[..., :-1] / peer_out[..., -1:].clamp_min(NORMALISER_FLOOR)
        assert_fp32_close(peer * real, out * real, terms, inputs["v"].abs().max().item(), f"fla {form} {gate}: out")
        assert_fp32_close(peer_state, state, 45 + decays + 1, abs_state.abs().max().item(),
                          f"fla {form} {gate}: final state")


# ---------------------------------------------------------------------------------------
# modules: full forward = incremental, numerics


def _incremental(module, x, tokens, padding=None):
    state, outputs = {}, []
    for t in range(x.size(0)):
        module.hand_in(sentence_starts=sentence_starts(tokens[:, max(0, t - 1):t + 1], SEP)[:, -1:])
        out, _ = module(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state,
                        key_padding_mask=None if padding is None else padding[:, t:t + 1])
        outputs.append(out)
    module.hand_in()
    return torch.cat(outputs, 0), state


def test_training_chunks_cost_the_least_arithmetic():
    """One chunk (no state) for short sequences, as many equal chunks as the longest would make
    beyond: with 256 causal projections (512 features) and 64-wide heads, one chunk below
    2 F (dv + 1) / (F + dv + 1) = 115.4 tokens."""
    choices = [cheapest_chunk_size(time, 512, 64, longest=64) for time in range(1, 401)]
    whole = [time for time, chunk in zip(range(1, 401), choices) if chunk >= time]
    for time, chunk in zip(range(1, 401), choices):
        assert chunk >= time or (chunk <= 64 and math.ceil(time / chunk) == math.ceil(time / 64)), (time, chunk)
    assert whole == list(range(1, 116))
    assert math.ceil(375 / cheapest_chunk_size(375, 512, 64, longest=64)) == 6  # 6 x 63, not 5 x 64 + 55


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("feature_map", ["fourier", "positive"])
@pytest.mark.parametrize("time,chunk_size,chunks,sentences,pad_lengths", [
    (41, 16, 3, [4, 1, 7], [41, 29, 35]),
    (11, 8, 1, [2, 1, 3], [11, 8, 9]),  # one chunk: below 2 F (dv + 1) / (F + dv + 1) = 11.5 tokens
])
def test_causal_module_incremental_equals_full(gate, feature_map, time, chunk_size, chunks, sentences, pad_lengths):
    # 16 features, 8-wide heads: the training step's chunks are those that cost the least arithmetic
    assert math.ceil(time / cheapest_chunk_size(time, 16, 8, longest=chunk_size)) == chunks
    module = _module_pair(gate, feature_map=feature_map, learned_tau=True, chunk_size=chunk_size)
    with torch.no_grad():
        module.tau.copy_(torch.tensor([0.7, 1.3]))
    generator = torch.Generator().manual_seed(5)
    tokens = random_windows(3, time, sentences, generator, pad_lengths=pad_lengths)
    x = torch.randn(time, 3, 16, generator=generator)
    padding = tokens.eq(PAD)
    full = _run_causal(module, x, tokens, padding)
    incremental, _ = _incremental(module, x, tokens, padding)
    real = ~padding.T.unsqueeze(-1)
    # Fourier features can make the normaliser φ(q)·z small: outputs (and their rounding) then
    # grow together, which the magnitude (largest |output|) carries
    module.hand_in(sentence_starts=sentence_starts(tokens, SEP))
    log_forget, _ = module._gates(x, padding)
    module.hand_in()
    terms = causal_module_terms(module, time) + decay_terms(time, log_forget)
    assert_fp32_close(incremental * real, full * real, terms,
                      name=f"causal module {gate} {feature_map} T={time} full-incremental")


@pytest.mark.parametrize("gate", GATES)
def test_long_windows_and_reduced_precision_stay_finite(gate):
    module = _module_pair(gate).train()
    generator = torch.Generator().manual_seed(6)
    tokens = random_windows(2, 300, 15, generator)  # L = 15 windows of ~300 tokens
    x = (3 * torch.randn(300, 2, 16, generator=generator)).requires_grad_()
    out = _run_causal(module, x, tokens)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    module.eval()
    reference = _run_causal(module, x.detach(), tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = _run_causal(module, x.detach(), tokens)
        low_incremental, _ = _incremental(module, x.detach(), tokens)
    assert torch.isfinite(low).all() and torch.isfinite(low_incremental).all()
    scale = reference.abs().max().item()
    # autocast rounds the input and weight of the input and output projections to bf16 (4
    # roundings); the rounding of q and k reaches the features' angles Wx̂/τ multiplied by
    # |Wx̂|/τ (≤ 4 here: head dim 8, τ = 1), 2 x 4 more
    bound = low_precision_tolerance(4 + 2 * 4, scale)
    print(f"[bf16] autocast vs fp32 ({gate}): {max_diff(low, reference):.3g} (bound {bound:.3g})")
    assert max_diff(low, reference) <= bound
    # full and incremental differ only in the bf16 projections of the whole sequence against one
    # row at a time (fp32 accumulations in another order, rounded to bf16: 1 rounding of q, k, v,
    # amplified as above, and of the output: 1 + 4 + 1)
    bound = low_precision_tolerance(2 * (1 + 4 + 1), scale)
    print(f"[bf16] full vs incremental ({gate}): {max_diff(low, low_incremental):.3g} (bound {bound:.3g})")
    assert max_diff(low, low_incremental) <= bound
    half = _module_pair(gate).half()
    half_out = _run_causal(half, x.detach().half(), tokens)
    assert half_out.dtype == torch.float16 and torch.isfinite(half_out).all()


# ---------------------------------------------------------------------------------------
# cross RFA


def test_cross_forms_agree_with_padding():
    inputs = op_inputs(time=23, gate="none", pad_lengths=[23, 15])
    keep = (~inputs["padding"]).float().unsqueeze(1).expand(-1, 3, -1)
    reference, reference_state = reference_cross_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"], keep)
    fast, state = cross_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"], keep)
    # positive features: terms of size max|v| over the features and the 23 keys
    assert_fp32_close(fast, reference, inputs["phi_q"].size(-1) + 23, inputs["v"].abs().max().item(),
                      "cross reference-state/readout")
    # the summary: 23 terms φ(k_i)·[v_i, 1] (at most 23·max φ·max(|v|, 1))
    _, abs_state = reference_cross_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"].abs(), keep)
    assert_fp32_close(state, reference_state, 23, abs_state.max().item(), "cross summary reference-training")


def test_decoding_keeps_the_smaller_exact_summary_of_the_source(time=23):
    """op_inputs: F = 8 features, dv = 5: φ(K) and [w v, w] (time x 14 numbers per head) are
    kept while they are smaller than the state (8 x 6 = 48), i.e. for sources of up to 3 tokens."""
    inputs = op_inputs(time=time, gate="none", pad_lengths=[time, time - 2])
    keep = (~inputs["padding"]).float().unsqueeze(1).expand(-1, 3, -1)
    short = op_inputs(time=3, gate="none", pad_lengths=[3, 2])
    short_keep = (~short["padding"]).float().unsqueeze(1).expand(-1, 3, -1)
    assert set(cross_rfa_summary(short["phi_k"], short["v"], short_keep)) == {"keys", "values"}
    summary = cross_rfa_summary(inputs["phi_k"], inputs["v"], keep)
    assert set(summary) == {"state"}
    for case, case_keep, case_time in ((short, short_keep, 3), (inputs, keep, time)):
        reference, _ = reference_cross_rfa(case["phi_q"], case["phi_k"], case["v"], case_keep)
        read = cross_rfa_read(case["phi_q"], cross_rfa_summary(case["phi_k"], case["v"], case_keep))
        # as test_cross_forms_agree_with_padding: the features and the keys, terms of size max|v|
        assert_fp32_close(read, reference, case["phi_q"].size(-1) + case_time, case["v"].abs().max().item(),
                          f"cross summary read, {case_time} source tokens")


@pytest.mark.parametrize("source,queries,kept", [
    (5, 5, {"keys", "values"}),   # 5 x 5 x 14 = 350 < (5 + 5) x 48: the re-associated read
    (23, 23, {"state"}),          # 23 x 23 x 14 > 46 x 48: the state
    (23, 2, {"keys", "values"}),  # few queries: 2 x 23 x 14 < 25 x 48
])
def test_training_reads_the_source_through_the_cheaper_exact_summary(source, queries, kept):
    """Training's summary counts the state's own cost (F = 8, dv = 5): the form chosen, and its
    output and gradients against the reference."""
    inputs = op_inputs(time=source, gate="none", pad_lengths=[source, source - 2], seed=source + queries)
    keep = (~inputs["padding"]).float().unsqueeze(1).expand(-1, 3, -1)
    leaves = {"phi_q": inputs["phi_q"][:, :, :queries].clone().requires_grad_(),
              "phi_k": inputs["phi_k"].clone().requires_grad_(), "v": inputs["v"].clone().requires_grad_()}
    summary = cross_rfa_summary(leaves["phi_k"], leaves["v"], keep, reads=queries)
    assert set(summary) == kept
    read = cross_rfa_read(leaves["phi_q"], summary)
    reference, _ = reference_cross_rfa(leaves["phi_q"], leaves["phi_k"], leaves["v"], keep)
    terms = inputs["phi_q"].size(-1) + source  # as test_cross_forms_agree_with_padding
    assert_fp32_close(read, reference, terms, inputs["v"].abs().max().item(), f"cross read, {kept}")
    weights = torch.randn_like(reference)
    grads = [torch.autograd.grad((out * weights).sum(), list(leaves.values())) for out in (reference, read)]
    for leaf, want, got in zip(leaves, *grads):
        # the backward pass runs the sums again, transposed, and sums over the values
        assert_fp32_close(got, want, 2 * (terms + inputs["v"].size(-1)), name=f"gradient of {leaf}, {kept}")


@pytest.mark.parametrize("gate", ["none"] + SENTENCE_GATES)
def test_cross_gate_summary_is_the_final_causal_state(gate):
    inputs = op_inputs(time=33, gate=gate, sentences=(4, 2), pad_lengths=[33, 26])
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    _, state = chunked_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"], log_forget, key_weight)
    weights = final_key_weights(log_forget, key_weight)
    # 33 decayed terms φ(k_i)·[v_i, 1]: their size is the state of |v|
    _, abs_state = chunked_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"].abs(), log_forget, key_weight)
    assert_fp32_close(cross_rfa_state(inputs["phi_k"], inputs["v"], weights), state, 33 + decay_terms(33, log_forget),
                      abs_state.abs().max().item(), "cross summary = final causal state")


# 16 wide, 2 heads: dv = 8; 32 projections: F = 64 Fourier features. Decoding keeps φ(K) and the
# values while the source is shorter than F (dv + 1) / (F + dv + 1) = 7.9 tokens, the state beyond.
@pytest.mark.parametrize("cross_gate", [False, True])
@pytest.mark.parametrize("source,form", [(9, "state"), (7, "keys")])
def test_cross_module_caches_the_source_summary_and_shares_it_across_beams(cross_gate, source, form):
    torch.manual_seed(0)
    module = RandomFeatureCrossAttention(16, 2, 32, seed=3, kdim=12, gate="sgate" if cross_gate else "none",
                                         cross_gate=cross_gate).eval()
    generator = torch.Generator().manual_seed(7)
    src = random_windows(2, source, 3, generator, pad_lengths=[source, source - 3])
    encoder_out = torch.randn(source, 2, 12, generator=generator)
    query = torch.randn(5, 2, 16, generator=generator)
    module.hand_in(sentence_starts=sentence_starts(src, SEP))
    full, _ = module(query, encoder_out, encoder_out, key_padding_mask=src.eq(PAD))
    # beam search: rows [sentence, beam], the summary computed once per sentence
    beam = 3
    module.set_beam_size(beam)
    expand = torch.arange(2).repeat_interleave(beam)
    module.hand_in(sentence_starts=sentence_starts(src, SEP)[expand])
    state, steps = {}, []
    for t in range(5):
        out, _ = module(query[t:t + 1, expand], encoder_out[:, expand], encoder_out[:, expand],
                        key_padding_mask=src.eq(PAD)[expand], incremental_state=state)
        steps.append(out)
        module.hand_in()  # no longer needed once the summary is cached
        module.reorder_incremental_state(state, torch.tensor([2, 0, 0, 4, 5, 3]))
    buffer = module._get_input_buffer(state)
    names = ["state"] if form == "state" else ["keys", "values"]
    assert [name for name in ("state", "keys", "values") if buffer.get(name) is not None] == names
    summary = {name: buffer[name] for name in names}
    assert all(value.size(0) == 2 for value in summary.values())  # one summary per sentence, not per beam
    incremental = torch.cat(steps, 0)
    # the training form reads the state: the keys form sums the same terms in another order
    assert_fp32_close(incremental, full[:, expand], causal_module_terms(module, source) + 12,
                      name=f"cross module full-incremental (cross gate {cross_gate}, {form})")
    # a sentence leaves the batch: the summaries follow
    module.reorder_incremental_state(state, torch.tensor([3, 4, 5]))
    assert all(torch.equal(module._get_input_buffer(state)[name], value[1:]) for name, value in summary.items())
    module.set_beam_size(1)


@pytest.mark.parametrize("source", [7, 9])  # the keys form, the state (see the test above)
def test_cross_module_outputs_follow_sentences_that_leave_the_batch(source):
    """Finished sentences leave the batch one by one: the summaries are compacted lazily, and
    every remaining sentence keeps reading its own source, before and after compaction."""
    torch.manual_seed(0)
    module = RandomFeatureCrossAttention(16, 2, 32, seed=3, kdim=12).eval()
    generator = torch.Generator().manual_seed(11)
    sentences, beam = 5, 2
    encoder_out = torch.randn(source, sentences, 12, generator=generator)
    padding = torch.zeros(sentences, source, dtype=torch.bool)
    padding[1, 5:] = padding[3, 2:] = True
    query = torch.randn(1, sentences * beam, 16, generator=generator)
    expand = torch.arange(sentences).repeat_interleave(beam)
    full, _ = module(query, encoder_out[:, expand], key_padding_mask=padding[expand])
    module.set_beam_size(beam)
    state = {}
    module(query, encoder_out[:, expand], key_padding_mask=padding[expand], incremental_state=state)
    remaining = list(range(sentences))
    stored_sizes = []
    for leaving in (2, 0, 4, 1):
        position = remaining.index(leaving)
        kept = [i for i in range(len(remaining)) if i != position]
        remaining.remove(leaving)
        # new_order over [sentence, beam] rows, beams swapped inside each remaining sentence
        order = torch.tensor([k * beam + (beam - 1 - b) for k in kept for b in range(beam)])
        module.reorder_incremental_state(state, order)
        buffer = module._get_input_buffer(state)
        stored_sizes.append(next(buffer[name] for name in ("state", "keys") if name in buffer).size(0))
        rows = torch.tensor([s * beam + b for s in remaining for b in range(beam)])
        out, _ = module(query[:, rows], None, incremental_state=state)
        assert_fp32_close(out, full[:, rows], causal_module_terms(module, source) + 12,
                          name=f"after sentence {leaving} left (stored {stored_sizes})")
    # compacted once at most 3/4 of the stored summaries are read: 4 of 5 keeps all 5, 3 of 5,
    # 2 of 3 and 1 of 2 compact
    assert stored_sizes == [5, 3, 2, 1]


@pytest.mark.parametrize("cross_gate,norm_rescale", [(False, False), (True, True)])
def test_decoding_builds_the_source_state_in_parts(monkeypatch, cross_gate, norm_rescale):
    """Decoding builds the sources' state a few sources at a time (here one per part), each part
    without the columns where all its sources are padding, and keeps it column-major: the state
    of the whole batch at once, whichever side the padding is on."""
    torch.manual_seed(0)
    module = RandomFeatureCrossAttention(16, 2, 4, seed=3, kdim=12, learned_tau=True, norm_rescale=norm_rescale,
                                         gate="sgate" if cross_gate else "none", cross_gate=cross_gate).eval()
    generator = torch.Generator().manual_seed(13)
    source = 11  # 8 features, 8-wide heads: the state is kept from 5 source tokens on
    src = random_windows(4, source, 2, generator, pad_lengths=[11, 6, 9, 3])
    src[1], src[3] = src[1].flip(0), src[3].flip(0)  # padding on the left
    encoder_out = torch.randn(source, 4, 12, generator=generator)
    padding, starts = src.eq(PAD), sentence_starts(src, SEP)
    with torch.no_grad():
        phi_k, v, key_weight = module._source_keys(encoder_out, padding, module.random_matrices.eval_matrix, starts)
        whole = cross_rfa_state(phi_k, v, key_weight)
        monkeypatch.setattr(rfa_layers, "SUMMARY_PART_FLOATS", {"cpu": 1})
        summary = module._decoding_summary(encoder_out, padding, starts)
    assert list(summary) == ["state"] and is_column_major(summary["state"])
    # every entry sums `source` products of a feature and a weighted value
    weighted = v.abs().max() * (1.0 if key_weight is None else key_weight.max())
    assert_fp32_close(summary["state"], whole, source, (phi_k.abs().max() * weighted).item(),
                      f"state in parts (cross gate {cross_gate}, norm-rescale {norm_rescale})")


def test_cross_attentions_training_read_is_the_same_one_head_at_a_time_or_all_at_once(monkeypatch):
    """Cross attention's training read through the source's keys: one head at a time (a CPU's
    form) or every head in one product (a GPU's), the same outputs and gradients (float64)."""
    torch.manual_seed(0)
    module = RandomFeatureCrossAttention(16, 2, 4, seed=3, kdim=12).double().eval()
    generator = torch.Generator().manual_seed(17)
    query = torch.randn(3, 2, 16, generator=generator, dtype=torch.float64).requires_grad_()
    key = torch.randn(4, 2, 12, generator=generator, dtype=torch.float64).requires_grad_()
    padding = torch.tensor([[False] * 4, [False, False, False, True]])
    assert keys_form_is_cheaper(4, module.features, module.head_dim + 1, reads=3)  # the keys are read
    results = []
    for devices in ({"cpu"}, set()):
        monkeypatch.setattr(rfa_layers, "PER_HEAD_KEYS_READ", devices)
        out, _ = module(query, key, key, key_padding_mask=padding)
        results.append((out, *torch.autograd.grad(out.square().sum(), (query, key))))
    for name, per_head, at_once in zip(("output", "query gradient", "key gradient"), *results):
        assert torch.allclose(per_head, at_once, rtol=1e-10, atol=1e-12), name


def test_part_spans_find_each_parts_columns_with_a_token_in_one_pass():
    """The columns each part of the sources must sum (first to last token of any of its sources),
    from one computation for all parts: as each part's own search finds them; None for a part of
    padding only."""
    generator = torch.Generator().manual_seed(21)
    real = torch.rand(11, 9, generator=generator) < 0.3
    real[4:8] = False  # with parts of 2 and 4: parts of padding only
    real[9, 0] = real[10, 8] = True  # the last, short part reaches both edges
    for part in (1, 2, 4, 11, 16):
        expected = []
        for first in range(0, 11, part):
            present = real[first:first + part].any(0).nonzero()
            expected.append(None if present.numel() == 0 else (int(present[0]), int(present[-1]) + 1))
        assert rfa_layers.part_spans(real, part) == expected, part
    assert rfa_layers.part_spans(real, 4)[1] is None and rfa_layers.part_spans(real, 11) == [(0, 9)]


def test_a_gpu_builds_the_source_state_in_few_parts():
    """The source state of a decoding batch is built in parts small enough for a CPU's caches, and
    on a GPU (where each part costs launches) in few: the paper's batch at L = 1 (1024 IWSLT15
    sentences, padded to 163 tokens; 8 heads, 256 cross projections: 512 features)."""
    cpu = rfa_layers.summary_part_size(torch.device("cpu"), 8, 163, 512)
    gpu = rfa_layers.summary_part_size(torch.device("cuda"), 8, 163, 512)
    assert cpu == 1 and -(-1024 // gpu) <= 16
    assert rfa_layers.summary_part_size(torch.device("cuda"), 8, 100_000, 512) == 1  # at least one source


def test_decoding_keeps_a_short_prefix_as_keys_then_a_column_major_state():
    """Causal decoding keeps the prefix as its keys and values while that is less than the state
    (16 features, 8-wide heads: t (16 + 9) < 16 x 9 up to 5 tokens), then as the state, created
    column-major (state.py: the readout's faster order) and kept so through updates and beam
    reorders; reorders move the keys' rows with the beams; two buffers serve throughout."""
    module = _module_pair("none")
    generator = torch.Generator().manual_seed(15)
    x = torch.randn(8, 3, 16, generator=generator)
    state, order, before, storages = {}, torch.tensor([2, 0, 0]), {}, []
    with torch.no_grad():
        for t in range(8):
            module(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state)
            buffer = module._get_input_buffer(state)
            if t < 5:
                assert buffer["state"] is None and buffer["keys"].shape == (3, 2, t + 1, 16)
                assert buffer["values"].shape == (3, 2, t + 1, 9)
                for name, tensor in before.items():  # this step's copy took the rows of the last reorder
                    assert torch.equal(buffer[name][:, :, :t], tensor[order])
                # two buffers per tensor, taking turns: no step allocates a new one
                storages.append(buffer["keys"].untyped_storage().data_ptr())
                before = {name: buffer[name].clone() for name in ("keys", "values")}
                module.reorder_incremental_state(state, order)
                continue
            assert storages[2:] == storages[:3] and len(set(storages)) == 2
            assert buffer["keys"] is None and buffer["values"] is None and buffer["spare_prefix"] is None
            # the state and its spare take over the keys' two buffers: nothing allocated or freed
            assert {buffer[name].untyped_storage().data_ptr() for name in ("state", "spare_state")} == set(storages)
            assert is_column_major(buffer["state"])
            module.reorder_incremental_state(state, order)
            assert is_column_major(module._get_input_buffer(state)["state"])


@pytest.mark.parametrize("gate", ["sgate", "token", "feature"])
def test_causal_decoding_switches_from_keys_to_the_state_where_that_costs_less(gate):
    """The switch point of the prefix's form is the arithmetic break-even (64 features and
    64-wide heads, the paper's causal sizes: 32 tokens as keys, the state from the 33rd), and
    both forms give the reference's outputs on either side of it, with gates and padding (a decay
    per feature scales the kept keys' features as it scales the state's rows)."""
    inputs = op_inputs(batch=2, heads=2, time=40, features=64, dv=64, sentences=(3, 2), pad_lengths=[40, 33],
                       gate=gate)
    log_forget, key_weight = gates_of(inputs, inputs["logits"])
    args = (inputs["phi_q"], inputs["phi_k"], inputs["v"])
    prefix, lengths = {}, []
    for t in range(40):
        weight = None if key_weight is None else key_weight[:, :, t]
        causal_decoding_step(*(a[:, :, t] for a in args), prefix, log_forget[:, :, t].exp(), weight)
        lengths.append(None if prefix["keys"] is None else prefix["keys"].size(2))
    assert lengths[:32] == list(range(1, 33)) and set(lengths[32:]) == {None}
    out, state = incremental_causal_rfa(*args, log_forget, key_weight)
    expected, expected_state = reference_causal_rfa(*args, log_forget, key_weight)
    real = ~inputs["padding"].unsqueeze(1).unsqueeze(-1)
    decays = decay_terms(40, log_forget)
    # as test_causal_forms_agree: terms of size max|v| over the features and the keys, and the
    # final state's sums over the keys
    assert_fp32_close(out * real, expected * real, 64 + 40 + decays, inputs["v"].abs().max().item(),
                      name="keys then state vs reference")
    _, abs_state = reference_causal_rfa(inputs["phi_q"], inputs["phi_k"], inputs["v"].abs(), log_forget, key_weight)
    assert_fp32_close(state, expected_state, 40 + decays, abs_state.max().item(), name="final state")


def _norm_rescale_case(cross_gate, seed=12):
    """A cross-attention module with learned τ and the norm-rescale, two source windows (row 1
    padded, its padding given huge keys) of several sentences, and queries."""
    torch.manual_seed(seed)
    module = RandomFeatureCrossAttention(16, 2, 32, seed=3, kdim=12, learned_tau=True, norm_rescale=True,
                                         gate="sgate" if cross_gate else "none", cross_gate=cross_gate).eval()
    with torch.no_grad():
        module.tau.copy_(torch.tensor([0.6, 1.4]))
    generator = torch.Generator().manual_seed(seed)
    src = random_windows(2, 11, 3, generator, pad_lengths=[11, 7])
    encoder_out = torch.randn(11, 2, 12, generator=generator) * torch.linspace(0.5, 3, 11).view(11, 1, 1)
    encoder_out[7:, 1] = 50.0  # padding: any max taken over it would swamp the real keys
    query = torch.randn(6, 2, 16, generator=generator)
    return module, src, encoder_out, query


def norm_rescale_reference(module, query, encoder_out, src):
    """Cross RFA with the release's norm-rescale written from its formula, quadratic:

        out_t = Σ_j a_tj v_j / max(Σ_j a_tj, floor),
        a_tj = φ(q_t)·φ(k_j) · exp(½ (|k_j| d^-½ / τ)² - m) · g_j,   m = max over real keys j

    (g_j: the cross gate's weight of key j, 1 without it, from the gate's own functions, which
    are tested against the causal recurrence; 0 at padding). Returns the output [time, batch,
    embed] and the summary (S, z) of each row."""
    heads, dim = module.num_heads, module.head_dim
    time, batch, _ = query.shape
    q = module.q_proj(query).view(time, batch, heads, dim).permute(1, 2, 0, 3)
    k, v = module.kv_proj(encoder_out).view(-1, batch, 2, heads, dim).permute(2, 1, 3, 0, 4).unbind(0)
    matrix = module.random_matrices.eval_matrix
    phi_q, phi_k = module.features_of(q, matrix), module.features_of(k, matrix)
    real = src.ne(PAD)[:, None, :]  # [batch, 1, source]
    exponent = 0.5 * (k.norm(dim=-1) / dim ** 0.5 / module.tau.view(1, heads, 1)) ** 2
    exponent = exponent.masked_fill(~real, float("-inf"))
    key_weight = torch.exp(exponent - exponent.amax(-1, keepdim=True).detach())
    if module.gate_variant != "none":
        logits = module.gate_logits(encoder_out).permute(1, 2, 0)
        key_weight = key_weight * final_key_weights(*sentence_gates(logits, sentence_starts(src, SEP),
                                                                    module.gate_variant, src.eq(PAD)))
    a = torch.einsum("bhtf,bhsf->bhts", phi_q, phi_k) * key_weight[:, :, None, :]
    out = (a @ v) / a.sum(-1, keepdim=True).clamp(min=NORMALISER_FLOOR)
    v_and_ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    summary = torch.einsum("bhsf,bhsd->bhfd", phi_k * key_weight[..., None], v_and_ones)
    return module.out_proj(out.permute(2, 0, 1, 3).reshape(time, batch, heads * dim)), summary


@pytest.mark.parametrize("cross_gate", [False, True])
def test_norm_rescale_forms_agree_with_the_formula(cross_gate):
    module, src, encoder_out, query = _norm_rescale_case(cross_gate)
    starts = sentence_starts(src, SEP)
    leaves = [query.clone().requires_grad_(), encoder_out.clone().requires_grad_()]
    reference, reference_summary = norm_rescale_reference(module, *leaves, src)
    # training form
    inputs = [query.clone().requires_grad_(), encoder_out.clone().requires_grad_()]
    module.hand_in(sentence_starts=starts)
    trained, _ = module(inputs[0], inputs[1], inputs[1], key_padding_mask=src.eq(PAD))
    summary = module.source_state(inputs[1], src.eq(PAD), module.random_matrices.eval_matrix, starts)
    terms = causal_module_terms(module, 11) + (decay_terms(11, torch.ones(1, 1, 11)) if cross_gate else 0)
    assert_fp32_close(trained, reference, terms,
                      name=f"norm-rescale training form vs formula (cross gate {cross_gate})")
    assert_fp32_close(summary, reference_summary, terms, name="summary vs formula")
    # gradients (the backward pass: each sum again, transposed)
    weights = torch.randn_like(reference)
    grads = [torch.autograd.grad((out * weights).sum(), leaf_set)
             for out, leaf_set in ((reference, leaves), (trained, inputs))]
    for name, want, got in zip(("query", "encoder output"), *grads):
        assert_fp32_close(got, want, 2 * terms, name=f"gradient of the {name}")
    # incremental form: the summary cached once per sentence, read by 3 beams each
    beam = 3
    module.set_beam_size(beam)
    expand = torch.arange(2).repeat_interleave(beam)
    module.hand_in(sentence_starts=starts[expand])
    state, steps = {}, []
    with torch.no_grad():
        for t in range(query.size(0)):
            steps.append(module(query[t:t + 1, expand], encoder_out[:, expand], encoder_out[:, expand],
                                key_padding_mask=src.eq(PAD)[expand], incremental_state=state)[0])
    module.set_beam_size(1)
    module.hand_in()
    assert_fp32_close(torch.cat(steps), reference[:, expand], terms, name="incremental (beams) vs formula")


def test_norm_rescale_ignores_padding_and_batch_neighbours():
    module, src, encoder_out, query = _norm_rescale_case(cross_gate=False)
    with torch.no_grad():
        batched, _ = module(query, encoder_out, encoder_out, key_padding_mask=src.eq(PAD))
        alone, _ = module(query[:, 1:], encoder_out[:7, 1:], encoder_out[:7, 1:], key_padding_mask=src[1:, :7].eq(PAD))
        louder = encoder_out.clone()
        louder[:, 0] *= 3  # the other row's keys grow: its maximum is no business of row 1
        neighbour, _ = module(query, louder, louder, key_padding_mask=src.eq(PAD))
    terms = causal_module_terms(module, 11)
    assert_fp32_close(alone[:, 0], batched[:, 1], terms, name="alone vs batched (padding of 50s)")
    assert_fp32_close(neighbour[:, 1], batched[:, 1], terms, name="a louder neighbour")
    # and the rescale does something: without it the same module reads the source otherwise
    module.norm_rescale = False
    with torch.no_grad():
        plain, _ = module(query, encoder_out, encoder_out, key_padding_mask=src.eq(PAD))
    assert max_diff(plain, batched) > 1e-2


# ---------------------------------------------------------------------------------------
# random matrices


def test_random_matrices_are_seeded_drawn_per_update_and_fixed_in_eval():
    a, b = RandomMatrices(2, 8, 4, seed=9), RandomMatrices(2, 8, 4, seed=9)
    other_layer = RandomMatrices(2, 8, 4, seed=10)
    assert torch.equal(a.bank, b.bank) and not torch.equal(a.bank, other_layer.bank)
    draws_a, draws_b = [], []
    for update in range(6):
        for _ in range(2):  # two micro-batches of an update (or two workers) draw the same matrices
            a.set_num_updates(update)  # fairseq calls it before every micro-batch
            draws_a.append(a())
            b.set_num_updates(update)
            draws_b.append(b())
    assert all(torch.equal(x, y) for x, y in zip(draws_a, draws_b))
    assert all(torch.equal(x, y) for x, y in zip(draws_a[0::2], draws_a[1::2]))
    assert len({tuple(x.flatten()[:3].tolist()) for x in draws_a}) > 3
    assert not torch.equal(a(), draws_a[-1])  # a second forward in one micro-batch draws anew
    torch.manual_seed(0)
    first = a()
    torch.manual_seed(1)  # global RNG plays no part
    a.draws_in_update -= 1
    assert torch.equal(first, a())
    a.eval()
    assert torch.equal(a(), a()) and torch.equal(a(), a.eval_matrix)


def test_evaluation_can_use_other_matrices_of_the_bank_and_training_still_draws():
    matrices = RandomMatrices(2, 8, 4, seed=9).eval()
    assert torch.equal(matrices.bank[0], matrices.eval_matrix)  # the evaluation matrix is the bank's first
    assert matrices.evaluate_with([3]) == 8 and torch.equal(matrices(), matrices.bank[3])
    assert matrices.evaluate_with([1, 2]) == 16
    stacked = matrices()
    assert stacked.shape == (2, 16, 4)
    assert torch.equal(stacked[:, :8], matrices.bank[1]) and torch.equal(stacked[:, 8:], matrices.bank[2])
    matrices.train()
    matrices.set_num_updates(0)
    assert matrices().shape == (2, 8, 4)  # training draws one matrix of the bank, as before
    matrices.eval()
    assert matrices.evaluate_with(None) == 8 and torch.equal(matrices(), matrices.eval_matrix)
    assert "eval_matrix" in matrices.state_dict() and matrices.state_dict()["eval_matrix"].shape == (2, 8, 4)
    for bad in ([16], [-1], []):
        with pytest.raises(ValueError, match="bank indices"):
            matrices.evaluate_with(bad)


def test_stacked_matrices_average_the_kernel_estimates_of_each():
    """K matrices stacked give K·D features: the kernel estimate is the mean of the K estimates."""
    matrices = RandomMatrices(2, 8, 4, seed=3).eval()
    generator = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 5, 4, generator=generator), torch.randn(2, 6, 4, generator=generator)
    each = []
    for index in range(4):
        matrices.evaluate_with([index])
        each.append(random_fourier_features(q, matrices()) @ random_fourier_features(k, matrices()).transpose(-1, -2))
    matrices.evaluate_with([0, 1, 2, 3])
    stacked = random_fourier_features(q, matrices()) @ random_fourier_features(k, matrices()).transpose(-1, -2)
    # a sum of 2·32 products of features of size up to 1 (the features: sines of 4-term products)
    assert_fp32_close(stacked, torch.stack(each).mean(0), terms=2 * 32 + 4, magnitude=1.0, name="stacked kernel")
    assert (each[0] - each[1]).abs().max() > 1e-3  # the matrices' estimates differ: the mean is a test


def test_a_decoder_evaluated_with_stacked_matrices_decodes_what_it_reads():
    from rfa_doc_mt.scoring.position_loss import use_bank_matrices

    model, _ = tiny_model("sgate", extra=["--rfa-gate-bias-init", "0.5"])
    model.eval()
    generator = torch.Generator().manual_seed(8)
    src = model_windows(2, 13, 3, generator)
    target = model_windows(2, 15, 3, generator)
    prev = torch.cat([torch.full((2, 1), EOS), target[:, :-1]], 1)
    with torch.no_grad():
        encoder_out = model.encoder(src, src.ne(PAD).sum(1))
        own, _ = model.decoder(prev, encoder_out)
        assert use_bank_matrices(model, [0, 5, 9]) == 2 * len(model.decoder.layers)
        full, _ = model.decoder(prev, encoder_out)
        state, steps = {}, []
        for t in range(15):
            steps.append(model.decoder(prev[:, :t + 1], encoder_out, incremental_state=state)[0])
    assert (full - own).abs().max() > 1e-3  # the other matrices are used
    terms = rfa_model_terms(model, source=13, target=15)  # the cross attention's features are now 3x
    assert_fp32_close(torch.cat(steps, 1), full, terms, name="decoder logits with stacked matrices")


# ---------------------------------------------------------------------------------------
# decoder level


def tiny_model(gate="none", cross_gate=False, seed=1, extra=()):
    dictionary, separator = toy_dictionary(36)
    assert separator == 40
    options = ["--rfa-gate", gate, "--encoder-layers", "1", "--decoder-layers", "2", "--dropout", "0", *extra]
    if cross_gate:
        options.append("--rfa-cross-gate")
    return build_model("rfa_doc_transformer_tiny", dictionary_task(dictionary, separator), *options,
                       seed=seed), dictionary


def model_windows(batch, time, sentences, generator, lengths=None, separator=40):
    tokens = torch.randint(4, 40, (batch, time), generator=generator)
    lengths = lengths or [time] * batch
    for b in range(batch):
        cuts = torch.randperm(lengths[b] - 3, generator=generator)[:sentences - 1] + 1
        tokens[b, cuts] = separator
        tokens[b, lengths[b] - 1] = EOS
        tokens[b, lengths[b]:] = PAD
    return tokens


@pytest.mark.parametrize("gate,cross_gate", [("none", False), ("sgate", False), ("sgate-avg", False),
                                             ("sgate", True), ("token", False), ("feature", False)])
def test_decoder_token_by_token_equals_one_forward_pass(gate, cross_gate):
    model, _ = tiny_model(gate, cross_gate, extra=["--rfa-gate-bias-init", "0.5"])
    generator = torch.Generator().manual_seed(8)
    src = model_windows(3, 17, 3, generator, lengths=[17, 11, 14])
    target = model_windows(3, 21, 4, generator, lengths=[21, 21, 16])
    prev = torch.cat([torch.full((3, 1), EOS), target[:, :-1]], 1)
    prev[2, 16:] = PAD  # fairseq's collater: EOS moved to the front, the row still 16 long
    encoder_out = model.encoder(src, src.ne(PAD).sum(1))
    full, _ = model.decoder(prev, encoder_out)
    state, steps = {}, []
    for t in range(21):
        out, _ = model.decoder(prev[:, :t + 1], encoder_out, incremental_state=state)
        steps.append(out)
    incremental = torch.cat(steps, 1)
    real = prev.ne(PAD).unsqueeze(-1)
    terms = rfa_model_terms(model, source=17, target=21)
    assert_fp32_close(incremental * real, full * real, terms, name=f"decoder logits full-incremental {gate} "
                                                                   f"cross_gate={cross_gate}")
    with torch.no_grad():  # as in beam search: the state is then updated in place
        state, steps = {}, []
        for t in range(21):
            steps.append(model.decoder(prev[:, :t + 1], encoder_out, incremental_state=state)[0])
            model.decoder.reorder_incremental_state_scripting(state, torch.arange(3))
    assert_fp32_close(torch.cat(steps, 1) * real, incremental * real, terms, name="in place vs out of place")
    # and an example alone gives what it gives in the batch
    alone, _ = model.decoder(prev[2:, :16], model.encoder(src[2:, :14], torch.tensor([14])))
    assert_fp32_close(alone[0], full[2, :16], terms, name="example alone vs in its batch")


def rfa_model_terms(model, source, target, vocabulary=0):
    """transformer_terms of a model built by tiny_model (RFA adds the features of the wider map)."""
    args = model.args
    features = max(layer.encoder_attn.features for layer in model.decoder.layers)
    return transformer_terms(args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.encoder_layers,
                             args.decoder_layers, source, target, features, vocabulary)


def _generate(model, dictionary, src, beam=4, max_len=12):
    generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len=max_len, min_len=3,
                                  search_strategy=search.BeamSearch(dictionary))
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1)}}
    return generator.generate([model], sample)


# beside every gate: softmax heads over the current sentence (test_rfa_local.py) and the delta rule
# (test_rfa_delta.py), whose decoding keeps other state
BEAM_SEARCH_MODELS = [(gate, ()) for gate in GATES] + [
    ("none", ("--rfa-cross-local-heads", "2", "--rfa-causal-local-heads", "2")),
    ("sgate", ("--rfa-update", "delta"))]


@pytest.mark.parametrize("gate,extra", BEAM_SEARCH_MODELS)
def test_beam_search_batched_equals_one_sentence_at_a_time(gate, extra):
    model, dictionary = tiny_model(gate, extra=extra)
    generator = torch.Generator().manual_seed(9)
    src = model_windows(3, 15, 3, generator, lengths=[15, 9, 12])
    batched = _generate(model, dictionary, src)
    for row, length in enumerate([15, 9, 12]):
        alone = _generate(model, dictionary, src[row:row + 1, :length])[0]
        for hypothesis, expected in zip(batched[row], alone):
            assert torch.equal(hypothesis["tokens"], expected["tokens"])
            # a score sums the log-probabilities of up to 12 tokens, each a log-softmax over the vocabulary
            terms = rfa_model_terms(model, source=15, target=12, vocabulary=len(dictionary)) + 12
            assert_fp32_close(hypothesis["score"], expected["score"], terms,
                              magnitude=hypothesis["positional_scores"].abs().max().item(), name="beam score")


def test_checkpoint_round_trip_restores_outputs_and_buffers(tmp_path):
    model, _ = tiny_model("sgate", seed=1)
    restored, _ = tiny_model("sgate", seed=2)  # different seed: different random matrices before loading
    generator = torch.Generator().manual_seed(10)
    src = model_windows(2, 13, 2, generator)
    prev = model_windows(2, 11, 3, generator)
    prev = torch.cat([torch.full((2, 1), EOS), prev[:, :-1]], 1)

    def logits(m):
        return m.decoder(prev, m.encoder(src, torch.tensor([13, 13])))[0]

    assert max_diff(logits(model), logits(restored)) > 1e-3
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    restored.load_state_dict(torch.load(path))
    assert torch.equal(logits(model), logits(restored))
    for (name, buffer), (_, other) in zip(model.named_buffers(), restored.named_buffers()):
        assert torch.equal(buffer, other), name
    # training draws follow the restored seed too
    model.train(), restored.train()
    model.set_num_updates(7), restored.set_num_updates(7)
    assert torch.equal(model.decoder.layers[1].self_attn.random_matrices(),
                       restored.decoder.layers[1].self_attn.random_matrices())


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def test_every_token_gates_take_their_options_and_only_causal_attention():
    """--rfa-gate-rank and --rfa-gate-temperature reach the feature gate (defaults: GLA's 16 and
    16); the gates at every token have no cross-attention form (the cross gate is sentential)."""
    model, _ = tiny_model("feature")
    gate = model.decoder.layers[0].self_attn
    assert gate.feature_gate.down.out_features == 16 and gate.gate_temperature == 16.0
    assert gate.feature_gate.up.out_features == gate.num_heads * gate.features and gate.gate_proj is None
    model, _ = tiny_model("feature", extra=["--rfa-gate-rank", "4", "--rfa-gate-temperature", "8"])
    gate = model.decoder.layers[1].self_attn
    assert gate.feature_gate.down.out_features == 4 and gate.gate_temperature == 8.0
    assert all(layer.encoder_attn.gate_variant == "none" for layer in model.decoder.layers)
    for variant in ("token", "feature"):
        with pytest.raises(ValueError, match="sentential gate"):
            tiny_model(variant, cross_gate=True)


def test_learned_tau_is_the_default_and_fixed_tau_is_an_option():
    model, _ = tiny_model()
    for layer in model.decoder.layers:
        for attention in (layer.self_attn, layer.encoder_attn):
            assert attention.tau is not None and attention.tau.requires_grad
            assert torch.equal(attention.tau.detach(), torch.ones(attention.num_heads))
    fixed, _ = tiny_model(extra=["--rfa-fixed-tau"])
    assert all(layer.self_attn.tau is None and layer.encoder_attn.tau is None for layer in fixed.decoder.layers)
    assert not fixed.decoder.layers[0].encoder_attn.norm_rescale
    rescaled, _ = tiny_model(extra=["--rfa-norm-rescale"])
    assert all(layer.encoder_attn.norm_rescale for layer in rescaled.decoder.layers)


def test_init_scale_initialises_the_projections_as_the_release():
    """--rfa-init-scale 6: Xavier-uniform weights with gain 6^-½ (each of q, k, v its own E x E
    matrix), cross attention's query and output normal with std 0.02·6^-½; 0 changes nothing."""
    default, _ = tiny_model("sgate")
    zero = tiny_model("sgate", extra=["--rfa-init-scale", "0"])[0].state_dict()
    assert default.state_dict().keys() == zero.keys()
    assert all(torch.equal(value, zero[name]) for name, value in default.state_dict().items())
    scaled, _ = tiny_model("sgate", extra=["--rfa-init-scale", "6"])
    embed = scaled.decoder.embed_dim
    gain = 6 ** -0.5

    def xavier_bound(fan_in, fan_out):
        return gain * math.sqrt(6 / (fan_in + fan_out))

    def uniform_to(weight, bound):
        # of n draws of U(-b, b) all stay under (1 - 20/n)·b once in e^20
        largest = weight.abs().max().item()
        assert (1 - 20 / weight.numel()) * bound < largest <= bound, (largest, bound)

    def normal_with(weight, std):
        # n = 16k normal draws: sample std and mean within 0.6% and 0.008σ (one standard error)
        assert weight.numel() >= 16384
        assert abs(weight.std().item() / std - 1) < 0.06 and abs(weight.mean().item()) < 0.1 * std

    square = xavier_bound(embed, embed)
    for layer, default_layer in zip(scaled.decoder.layers, default.decoder.layers):
        causal, cross = layer.self_attn, layer.encoder_attn
        for part in causal.in_proj.weight.detach().chunk(3, dim=0):
            uniform_to(part, square)
        # the fused default spans 3E x E: a wider bound, which the release's q, k, v stay under
        assert default_layer.self_attn.in_proj.weight.abs().max() > 1.1 * square
        uniform_to(causal.out_proj.weight.detach(), square)
        uniform_to(causal.gate_proj.weight.detach(), xavier_bound(embed, causal.rfa_heads))
        assert torch.equal(causal.gate_proj.bias.detach(), default_layer.self_attn.gate_proj.bias.detach())
        for part in cross.kv_proj.weight.detach().chunk(2, dim=0):
            uniform_to(part, xavier_bound(cross.kdim, embed))
        normal_with(cross.q_proj.weight.detach(), 0.02 * gain)
        normal_with(cross.out_proj.weight.detach(), 0.02 * gain)
        assert default_layer.encoder_attn.q_proj.weight.abs().max() > 0.1  # fairseq's: U(±0.153)
        for attention in (causal, cross):
            assert all(not bias.any() for name, bias in attention.named_parameters() if name.endswith("proj.bias")
                       and "gate" not in name)
            assert torch.equal(attention.tau.detach(), torch.ones(attention.rfa_heads))
    with pytest.raises(ValueError, match="init-scale"):
        tiny_model(extra=["--rfa-init-scale", "-1"])


def test_a_checkpoint_trained_with_fixed_tau_still_loads_and_computes_what_it_did():
    """tests/fixtures/rfa_fixed_tau: a tiny RFA-sgate model trained (2 updates) by the version
    before learned τ became the default (commit 7cdb424), with the logits it computed then."""
    from fairseq import checkpoint_utils

    directory = os.path.join(FIXTURES, "rfa_fixed_tau")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(directory, "checkpoint.pt")], arg_overrides={"data": directory})
    model = models[0].eval()
    assert not cfg.model.rfa_learned_tau
    assert all(layer.self_attn.tau is None and layer.encoder_attn.tau is None for layer in model.decoder.layers)
    expected = torch.load(os.path.join(directory, "expected.pt"))
    src = expected["src_tokens"]
    with torch.no_grad():
        logits = model(src, src.ne(PAD).sum(1), expected["prev_output_tokens"])[0]
    args = cfg.model  # 16 wide, FFN 16, 1 + 1 layers, 2 x 4 projections
    terms = transformer_terms(args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.encoder_layers,
                              args.decoder_layers, src.size(1), logits.size(1), features=8)
    assert_fp32_close(logits, expected["logits"], terms, name="old checkpoint's logits, then and now")

