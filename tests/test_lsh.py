"""LSH attention (Petrick et al. 2022): reference, training and incremental forms, the model, beam search."""


import pytest
import torch
from conftest import FP32_EPS, assert_fp32_close, build_model, transformer_terms

import rfa_doc_mt  # noqa: F401  (registers the task and models)
from rfa_doc_mt.models.build import dictionary_task, toy_dictionary
from rfa_doc_mt.modules.lsh_attention import (
    LSHCrossAttention,
    LSHSelfAttention,
    hash_vectors,
    lsh_cross_attention,
    lsh_self_attention,
    random_ranks,
    random_rotations,
    reference_lsh_cross_attention,
    reference_lsh_self_attention,
)
from rfa_doc_mt.modules.lsh_attention.training import (
    dense_is_cheaper,
    dense_lsh_cross_attention,
    dense_lsh_self_attention,
    windowed_lsh_cross_attention,
    windowed_lsh_self_attention,
)


def op_terms(dim, keys):
    """Longest accumulation of an LSH attention output: the scores' dot products over ``dim``,
    then a softmax (exp and sum) and a weighted sum over at most ``keys`` keys (every round's
    chunks together never hold more keys than the sequence), the rounds' combination included.
    Outputs are convex combinations of the values: terms of size max|values|."""
    return dim + 2 * keys


def module_terms(module, keys):
    """op_terms behind a module's input (q, k, v) and output projections."""
    return 2 * module.embed_dim + op_terms(module.head_dim, keys)


def model_terms(source, target, vocabulary=0):
    """conftest.transformer_terms for lsh_doc_transformer_tiny (128 wide, FFN 256, 2 + 2 layers)."""
    return transformer_terms(128, 256, 2, 2, source, target, vocabulary=vocabulary)


# Each op has two forms, chosen by size (training.dense_is_cheaper): every equivalence below is
# checked on both
FORMS = ["windowed", "dense"]
SELF_FORMS = {"windowed": windowed_lsh_self_attention, "dense": dense_lsh_self_attention}
CROSS_FORMS = {"windowed": windowed_lsh_cross_attention, "dense": dense_lsh_cross_attention}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors (conftest.one_thread)


def random_case(batch=2, heads=2, time=23, dim=8, rounds=3, classes=4, padding=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shared_qk = torch.randn(batch, heads, time, dim, generator=generator)
    values = torch.randn(batch, heads, time, dim, generator=generator)
    hash_classes = torch.randint(0, classes, (batch, heads, rounds, time), generator=generator)
    key_padding_mask = torch.zeros(batch, time, dtype=torch.bool)
    if padding:
        key_padding_mask[-1, -padding:] = True
    return shared_qk, values, hash_classes, key_padding_mask


def random_cross_case(batch=2, heads=2, query_time=17, key_time=26, dim=8, rounds=3, classes=4, padding=7, seed=1):
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(batch, heads, query_time, dim, generator=generator)
    keys = torch.randn(batch, heads, key_time, dim, generator=generator)
    values = torch.randn(batch, heads, key_time, dim, generator=generator)
    query_classes = torch.randint(0, classes, (batch, heads, rounds, query_time), generator=generator)
    key_classes = torch.randint(0, classes, (batch, heads, rounds, key_time), generator=generator)
    key_padding_mask = torch.zeros(batch, key_time, dtype=torch.bool)
    if padding:
        key_padding_mask[0, -padding:] = True
    return queries, keys, values, query_classes, key_classes, key_padding_mask


def full_softmax(queries, keys, values, allowed):
    scores = queries @ keys.transpose(-1, -2) / queries.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ values


# ---- hashing ---------------------------------------------------------------------------------


def test_hash_is_argmax_over_rotation_and_its_negation():
    rotations = random_rotations(num_heads=2, rounds=3, head_dim=5, hash_classes=6, seed=7)
    vectors = torch.randn(1, 2, 11, 5)
    classes = hash_vectors(vectors, rotations)
    assert classes.shape == (1, 2, 3, 11) and classes.min() >= 0 and classes.max() < 6
    for head in range(2):
        for r in range(3):
            projected = vectors[0, head] @ rotations[head, r]
            expected = torch.cat([projected, -projected], -1).argmax(-1)
            assert torch.equal(classes[0, head, r], expected)
    assert torch.equal(hash_vectors(vectors * 3.5, rotations), classes)  # angular: scale-free


def test_rotations_come_from_their_seed_not_the_global_rng():
    state = torch.get_rng_state()
    first = random_rotations(2, 3, 4, 8, seed=11)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, random_rotations(2, 3, 4, 8, seed=11))
    assert not torch.equal(first, random_rotations(2, 3, 4, 8, seed=12))
    assert not torch.equal(first[:, 0], first[:, 1])  # rounds are independent hash functions
    with pytest.raises(ValueError, match="even"):
        random_rotations(2, 1, 4, 5, seed=0)


# ---- equivalences ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("causal", [False, True])
def test_one_class_and_one_chunk_is_full_softmax_self_attention(causal, form):
    shared_qk, values, _, key_padding_mask = random_case()
    time = shared_qk.shape[2]
    one_class = torch.zeros(2, 2, 2, time, dtype=torch.long)
    output = SELF_FORMS[form](shared_qk, values, one_class, chunk_size=time, causal=causal,
                              key_padding_mask=key_padding_mask)
    # full softmax with the LSH conventions: unit-length keys, no attention to itself, and
    # position 0 of causal attention (no earlier key) falls back to itself
    keys = torch.nn.functional.normalize(shared_qk, dim=-1)
    positions = torch.arange(time)
    allowed = (positions[:, None] != positions[None, :]) & ~key_padding_mask[:, None, None, :]
    if causal:
        allowed &= positions[:, None] > positions[None, :]
    expected = full_softmax(shared_qk, keys, values, allowed)
    if causal:
        expected[:, :, 0] = values[:, :, 0]
    real = ~key_padding_mask  # padded queries are never read
    assert_fp32_close(output.transpose(1, 2)[real], expected.transpose(1, 2)[real], op_terms(8, time),
                      values.abs().max().item(), f"one class, one chunk vs full softmax (causal={causal})")


@pytest.mark.parametrize("form", FORMS)
def test_one_class_and_one_chunk_is_full_softmax_cross_attention(form):
    queries, keys, values, _, _, key_padding_mask = random_cross_case()
    one_class_q = torch.zeros(2, 2, 1, queries.shape[2], dtype=torch.long)
    one_class_k = torch.zeros(2, 2, 1, keys.shape[2], dtype=torch.long)
    output = CROSS_FORMS[form](queries, keys, values, one_class_q, one_class_k, chunk_size=keys.shape[2],
                               key_padding_mask=key_padding_mask)
    expected = full_softmax(queries, keys, values, ~key_padding_mask[:, None, None, :])
    assert_fp32_close(output, expected, op_terms(8, keys.shape[2]), values.abs().max().item(),
                      "one class, one chunk vs full softmax (cross)")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 5, 30])
def test_self_attention_training_form_matches_reference(causal, chunk_size, form):
    shared_qk, values, classes, key_padding_mask = random_case()
    inputs = [shared_qk.clone().requires_grad_(), values.clone().requires_grad_()]
    reference_inputs = [shared_qk.clone().requires_grad_(), values.clone().requires_grad_()]
    output = SELF_FORMS[form](*inputs, classes, chunk_size, causal=causal, key_padding_mask=key_padding_mask)
    expected = reference_lsh_self_attention(*reference_inputs, classes, chunk_size, causal=causal,
                                            key_padding_mask=key_padding_mask)
    terms = op_terms(8, shared_qk.shape[2])
    assert_fp32_close(output, expected, terms, values.abs().max().item(), "self training form vs reference")
    weights = torch.randn_like(output)
    (output * weights).sum().backward()
    (expected * weights).sum().backward()
    for got, want in zip(inputs, reference_inputs):  # the backward pass: each sum again, transposed
        assert_fp32_close(got.grad, want.grad, 2 * terms, name="self gradients vs reference")


@pytest.mark.parametrize("chunk_size,query_chunk_size,shuffled", [
    (1, None, False), (4, None, False), (5, 3, False), (3, 1, False), (40, None, False), (4, None, True)])
@pytest.mark.parametrize("form", FORMS)
def test_cross_attention_training_form_matches_reference(chunk_size, query_chunk_size, shuffled, form):
    queries, keys, values, query_classes, key_classes, key_padding_mask = random_cross_case()
    orders = {}
    if shuffled:
        generator = torch.Generator().manual_seed(3)
        orders = dict(query_order=random_ranks(query_classes.shape, generator, "cpu"),
                      key_order=random_ranks(key_classes.shape, generator, "cpu"))
    inputs = [t.clone().requires_grad_() for t in (queries, keys, values)]
    reference_inputs = [t.clone().requires_grad_() for t in (queries, keys, values)]
    kwargs = dict(query_chunk_size=query_chunk_size, key_padding_mask=key_padding_mask, **orders)
    output = CROSS_FORMS[form](*inputs, query_classes, key_classes, chunk_size, **kwargs)
    expected = reference_lsh_cross_attention(*reference_inputs, query_classes, key_classes, chunk_size, **kwargs)
    terms = op_terms(8, keys.shape[2])
    assert_fp32_close(output, expected, terms, values.abs().max().item(), "cross training form vs reference")
    weights = torch.randn_like(output)
    (output * weights).sum().backward()
    (expected * weights).sum().backward()
    for got, want in zip(inputs, reference_inputs):  # the backward pass: each sum again, transposed
        assert_fp32_close(got.grad, want.grad, 2 * terms, name="cross gradients vs reference")


@pytest.mark.parametrize("form", FORMS)
def test_a_key_offered_by_several_rounds_counts_once(form):
    """Repeating a round adds no key: with duplicates counted once the output is unchanged."""
    shared_qk, values, classes, key_padding_mask = random_case(rounds=2)
    repeated = torch.cat([classes, classes[:, :, :1]], dim=2)
    for causal in (False, True):
        assert_fp32_close(
            SELF_FORMS[form](shared_qk, values, repeated, 4, causal=causal, key_padding_mask=key_padding_mask),
            SELF_FORMS[form](shared_qk, values, classes, 4, causal=causal, key_padding_mask=key_padding_mask),
            op_terms(8, shared_qk.shape[2]), values.abs().max().item(), "self, a round repeated")
    queries, keys, values, query_classes, key_classes, key_padding_mask = random_cross_case(rounds=2)
    assert_fp32_close(
        CROSS_FORMS[form](queries, keys, values, torch.cat([query_classes] * 2, 2), torch.cat([key_classes] * 2, 2),
                          4, key_padding_mask=key_padding_mask),
        CROSS_FORMS[form](queries, keys, values, query_classes, key_classes, 4, key_padding_mask=key_padding_mask),
        op_terms(8, keys.shape[2]), values.abs().max().item(), "cross, rounds repeated")


# ---- one-hot oracles: zero logits make every softmax uniform, so outputs are plain averages ---


def python_self_attention_sets(classes, chunk_size, causal):
    """Pure Python: per round sort by (class, position), chunk, window; union over rounds."""
    time = len(classes[0])
    sets = [set() for _ in range(time)]
    for round_classes in classes:
        order = sorted(range(time), key=lambda p: (round_classes[p], p))
        chunk = {p: slot // chunk_size for slot, p in enumerate(order)}
        for i in range(time):
            for j in range(time):
                near = chunk[j] - chunk[i] in ((-1, 0) if causal else (-1, 0, 1))
                if j != i and round_classes[j] == round_classes[i] and near and (j < i or not causal):
                    sets[i].add(j)
    return [s or {i} for i, s in enumerate(sets)]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_size", [2, 3, 100])
def test_self_attention_one_hot_oracle(causal, chunk_size, form):
    time, dim = 13, 13
    classes = torch.tensor([[0, 1, 0, 2, 1, 1, 3, 0, 2, 2, 1, 0, 3],
                            [1, 1, 0, 0, 2, 3, 3, 1, 0, 2, 2, 1, 0]])
    values = torch.eye(time).view(1, 1, time, dim)  # one-hot: the output row lists the weights
    output = SELF_FORMS[form](torch.zeros(1, 1, time, dim), values, classes.view(1, 1, 2, time),
                              chunk_size, causal=causal)[0, 0]
    for i, chosen in enumerate(python_self_attention_sets(classes.tolist(), chunk_size, causal)):
        expected = torch.zeros(time)
        expected[list(chosen)] = 1.0 / len(chosen)
        # zero scores: a softmax over at most 13 keys, then one-hot values
        assert_fp32_close(output[i], expected, op_terms(dim, time), 1.0, f"one-hot oracle, query {i}")
    if chunk_size == 100:  # chunks cover the sequence: exactly "shares its class in any round"
        for i in range(time):
            shares = [j for j in range(time) if j != i and (not causal or j < i)
                      and any(classes[r, j] == classes[r, i] for r in range(2))]
            assert set(torch.nonzero(output[i]).flatten().tolist()) == (set(shares) or {i})


@pytest.mark.parametrize("form", FORMS)
def test_cross_attention_aligns_chunks_and_falls_back_to_the_window_average(form):
    """Hand-worked example, one round, chunks of 2 (Petrick et al. 2022, §3, Figure 2).

    Keys sorted by class: K0 = {0, 1} (class 0), K1 = {2, 3} (class 1), K2 = {4, 5} (class 2),
    K3 = {6, 7} (class 3). Queries sorted by class: q1 (0), q0 (3), q2 (3). Query chunk {q1, q0}
    spans classes 0..3: first key chunk with class 0 is K0, last with class 3 is K3, aligned =
    ceil((0 + 3) / 2) = K2, window K1..K3 = keys 2..7. q0 attends to keys 6, 7; class 0 is absent
    from the window, so q1 takes the average of keys 2..7. Query chunk {q2} (class 3) aligns to
    K3, whose window K2, K3 ends at the last chunk: keys 6, 7.
    """
    key_classes = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]).view(1, 1, 1, 8)
    query_classes = torch.tensor([3, 0, 3]).view(1, 1, 1, 3)
    values = torch.eye(8).view(1, 1, 8, 8)
    output = CROSS_FORMS[form](torch.zeros(1, 1, 3, 8), torch.zeros(1, 1, 8, 8), values,
                               query_classes, key_classes, chunk_size=2)[0, 0]
    expected = torch.zeros(3, 8)
    expected[0, [6, 7]] = 1 / 2
    expected[1, 2:] = 1 / 6
    expected[2, [6, 7]] = 1 / 2
    assert_fp32_close(output, expected, op_terms(8, 8), 1.0, "hand-worked cross example")


@pytest.mark.parametrize("form", FORMS)
def test_cross_attention_class_absent_from_all_keys(form):
    """Keys of classes 0 (K0, K1) and 2 (K2, K3); a query of class 1 finds the first chunk with a
    larger class (K2) and the last with a smaller one (K1): aligned = ceil(3 / 2) = K2, and with
    no key of its class it averages the window K1..K3 = keys 2..7. Padded keys 6, 7 leave K3 out."""
    key_classes = torch.tensor([0, 0, 0, 0, 2, 2, 2, 2]).view(1, 1, 1, 8)
    values = torch.eye(8).view(1, 1, 8, 8)
    zeros = torch.zeros(1, 1, 8, 8)
    output = CROSS_FORMS[form](torch.zeros(1, 1, 1, 8), zeros, values, torch.ones(1, 1, 1, 1, dtype=torch.long),
                               key_classes, chunk_size=2)[0, 0, 0]
    expected = torch.zeros(8)
    expected[2:] = 1 / 6
    assert_fp32_close(output, expected, op_terms(8, 8), 1.0, "class absent from the keys")
    padded = torch.zeros(1, 8, dtype=torch.bool)
    padded[0, 6:] = True
    output = CROSS_FORMS[form](torch.zeros(1, 1, 1, 8), zeros, values, torch.ones(1, 1, 1, 1, dtype=torch.long),
                               key_classes, chunk_size=2, key_padding_mask=padded)[0, 0, 0]
    expected = torch.zeros(8)
    expected[2:6] = 1 / 4  # last real chunk is K2 now: j1 = K2, j2 = K1, aligned K2, window K1, K2
    assert_fp32_close(output, expected, op_terms(8, 8), 1.0, "class absent, padded keys")


# ---- causality -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_causal_outputs_do_not_depend_on_later_positions(form):
    shared_qk, values, classes, _ = random_case(batch=1, padding=0)
    for t in (0, 5, 11, 22):
        inputs = [shared_qk.clone().requires_grad_(), values.clone().requires_grad_()]
        output = SELF_FORMS[form](*inputs, classes, chunk_size=4, causal=True)
        # a random projection of the output (see conftest.probe_like)
        probe = torch.randn(output[:, :, t].shape, generator=torch.Generator().manual_seed(t))
        (output[:, :, t] * probe).sum().backward()
        for tensor in inputs:
            assert t == 22 or tensor.grad[:, :, t + 1:].abs().max() == 0
        assert inputs[1].grad[:, :, :t + 1].abs().max() > 0  # (it does depend on something)


# ---- memory: what the training forms keep for the backward pass is linear in the length ------


def kept_for_backward(function, *inputs):
    """Bytes of the unique storages autograd keeps between the forward and the backward pass."""
    kept = {}

    def pack(tensor):
        kept[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    inputs = [t.clone().requires_grad_() for t in inputs]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function(*inputs)
    return sum(kept.values())


@pytest.mark.parametrize("form", ["self", "causal", "cross", "full"])
def test_memory_kept_for_backward_does_not_grow_with_length_at_a_fixed_token_budget(form):
    sizes = {}
    for batch, time in ((8, 40), (1, 320)):  # 320 tokens either way
        x, values, _, _ = random_case(batch=batch, heads=2, time=time, dim=16, rounds=2, padding=0)
        classes = torch.randint(0, 4, (batch, 2, 2, time), generator=torch.Generator().manual_seed(0))
        if form == "full":
            function = lambda q, v: torch.softmax(q @ q.transpose(-1, -2), -1) @ v  # noqa: E731
        elif form == "cross":
            function = lambda q, v: lsh_cross_attention(q, q, v, classes, classes.flip(-1), 4)  # noqa: E731
        else:
            function = lambda q, v: lsh_self_attention(q, v, classes, 4, causal=form == "causal")  # noqa: E731
        sizes[time] = kept_for_backward(function, x, values)
    if form == "full":
        assert sizes[320] > 4 * sizes[40]  # the measurement does see quadratic memory
    else:
        assert sizes[320] <= 1.02 * sizes[40]



@pytest.mark.parametrize("rounds", [1, 2, 4])
@pytest.mark.parametrize("op", ["self", "causal", "cross"])
def test_dense_form_where_chosen_costs_no_more_memory_than_the_windows(op, rounds):
    """At the longest length the ops compute densely (all pairs = the rounds' windows), the dense
    form keeps no more for the backward pass than the windowed one."""
    chunk = 4
    window = (2 if op == "causal" else 3) * chunk
    time = rounds * window
    assert dense_is_cheaper(time, rounds, window) and not dense_is_cheaper(time + chunk, rounds, window)
    x, values, _, _ = random_case(batch=8, heads=2, time=time, dim=16, rounds=rounds, padding=0)
    classes = torch.randint(0, 4, (8, 2, rounds, time), generator=torch.Generator().manual_seed(0))
    kept = {}
    for form in FORMS:
        if op == "cross":
            function = lambda q, v: CROSS_FORMS[form](q, q, v, classes, classes.flip(-1), chunk)  # noqa: E731
        else:
            function = lambda q, v: SELF_FORMS[form](q, v, classes, chunk, causal=op == "causal")  # noqa: E731
        kept[form] = kept_for_backward(function, x, values)
    assert kept["dense"] <= kept["windowed"]


@pytest.mark.parametrize("op", ["self", "causal", "cross"])
def test_each_op_computes_densely_exactly_where_that_is_cheaper(op, monkeypatch):
    from rfa_doc_mt.modules.lsh_attention import training

    called = []
    for name in ("dense_lsh_self_attention", "windowed_lsh_self_attention", "dense_lsh_cross_attention",
                 "windowed_lsh_cross_attention"):
        original = getattr(training, name)
        monkeypatch.setattr(training, name, lambda *a, _f=original, _n=name, **k: called.append(_n) or _f(*a, **k))
    chunk, rounds = 4, 2
    window = (2 if op == "causal" else 3) * chunk  # keys a query sees per round
    for time, dense in ((rounds * window, True), (rounds * window - 1, True), (rounds * window + 1, False)):
        x, values, classes, _ = random_case(batch=1, time=time, rounds=rounds, padding=0)
        called.clear()
        if op == "cross":
            lsh_cross_attention(x, x, values, classes, classes, chunk)
        else:
            lsh_self_attention(x, values, classes, chunk, causal=op == "causal")
        kind = "cross" if op == "cross" else "self"
        assert called == [f"{'dense' if dense else 'windowed'}_lsh_{kind}_attention"], (time, called)

# ---- modules: shuffle, incremental decoding, beam search -------------------------------------


def test_cross_attention_shuffles_only_in_training():
    torch.manual_seed(0)
    module = LSHCrossAttention(16, 2, chunk_size=3, hash_classes=2, rounds=1, seed=5)
    query, key = torch.randn(9, 2, 16), torch.randn(40, 2, 16)  # ~20 keys a class > a 9-key window
    module.eval()
    state = torch.get_rng_state()
    evaluated = module(query, key, key)[0]
    assert torch.equal(module(query, key, key)[0], evaluated)  # the same computation, repeated
    # inference sorts by position: the plain op without any shuffle
    queries, keys, values = (module._split_heads(p(x)) for p, x in
                             ((module.q_proj, query), (module.k_proj, key), (module.v_proj, key)))
    plain = lsh_cross_attention(queries, keys, values, hash_vectors(queries, module.rotations),
                                hash_vectors(keys, module.rotations), 3)
    assert_fp32_close(evaluated, module.out_proj(module._merge_heads(plain)), module_terms(module, 40),
                      name="evaluation vs the plain op")
    module.train()  # dropout is 0: only the shuffle differs
    module.set_num_updates(3)
    trained = module(query, key, key)[0]
    assert not torch.allclose(trained, evaluated, atol=1e-4)
    assert torch.equal(module(query, key, key)[0], trained)  # recomputation repeats it
    module.set_num_updates(4)
    assert not torch.allclose(module(query, key, key)[0], trained, atol=1e-4)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched


def decode_step_by_step(module, inputs, key=None, incremental_state=None):
    state = {} if incremental_state is None else incremental_state
    outputs = [module(x.unsqueeze(0), key, key, incremental_state=state)[0] for x in inputs]
    return torch.cat(outputs), state


def test_incremental_self_attention_is_the_unchunked_class_restriction():
    torch.manual_seed(0)
    time = 21
    module = LSHSelfAttention(16, 2, causal=True, chunk_size=3, hash_classes=4, rounds=2, seed=3).eval()
    x = torch.randn(time, 3, 16)
    stepped, _ = decode_step_by_step(module, x)
    shared_qk, values = module._split_heads(module.q_proj(x)), module._split_heads(module.v_proj(x))
    classes = hash_vectors(shared_qk, module.rotations)
    promised = reference_lsh_self_attention(shared_qk, values, classes, None, causal=True)
    assert_fp32_close(stepped, module.out_proj(module._merge_heads(promised)), module_terms(module, time),
                      name="incremental self vs reference")
    # = the training form once one chunk holds the whole sequence ...
    one_chunk = lsh_self_attention(shared_qk, values, classes, time, causal=True)
    assert_fp32_close(promised, one_chunk, op_terms(module.head_dim, time), values.abs().max().item(),
                      "reference vs one chunk")
    # ... and not the training form with chunks of 3 (which needs the whole sequence's sort)
    assert not torch.allclose(promised, lsh_self_attention(shared_qk, values, classes, 3, causal=True), atol=1e-3)


def test_incremental_cross_attention_uses_one_query_per_chunk():
    torch.manual_seed(0)
    module = LSHCrossAttention(16, 2, chunk_size=3, hash_classes=4, rounds=2, seed=3).eval()
    query, key = torch.randn(15, 3, 16), torch.randn(19, 3, 16)
    key_padding_mask = torch.zeros(3, 19, dtype=torch.bool)
    key_padding_mask[1, -6:] = True
    state = {}
    stepped = torch.cat([module(q.unsqueeze(0), key, key, key_padding_mask=key_padding_mask,
                                incremental_state=state)[0] for q in query])
    queries, keys, values = (module._split_heads(p(x)) for p, x in
                             ((module.q_proj, query), (module.k_proj, key), (module.v_proj, key)))
    promised = lsh_cross_attention(queries, keys, values, hash_vectors(queries, module.rotations),
                                   hash_vectors(keys, module.rotations), 3, query_chunk_size=1,
                                   key_padding_mask=key_padding_mask)
    assert_fp32_close(stepped, module.out_proj(module._merge_heads(promised)), module_terms(module, 19),
                      name="incremental cross vs one query a chunk")


def test_beam_reordering_continues_the_selected_hypotheses():
    torch.manual_seed(0)
    self_attention = LSHSelfAttention(16, 2, causal=True, chunk_size=2, hash_classes=2, rounds=2, seed=1).eval()
    cross_attention = LSHCrossAttention(16, 2, chunk_size=2, hash_classes=2, rounds=2, seed=2).eval()
    rows, before, after = 6, 5, 4  # batch 2 x beam 3
    history, future = torch.randn(before, rows, 16), torch.randn(after, rows, 16)
    encoder_out = torch.randn(11, rows, 16)  # different per row: the cache must follow the reorder
    new_order = torch.tensor([2, 2, 0, 4, 3, 3])
    state = {}
    decode_step_by_step(self_attention, history, incremental_state=state)
    decode_step_by_step(cross_attention, history, encoder_out, incremental_state=state)
    self_attention.reorder_incremental_state(state, new_order)
    cross_attention.reorder_incremental_state(state, new_order)
    continued_self, _ = decode_step_by_step(self_attention, future, incremental_state=state)
    continued_cross, _ = decode_step_by_step(cross_attention, future, encoder_out, incremental_state=state)
    # from scratch on the reordered prefixes
    replayed = torch.cat([history.index_select(1, new_order), future])
    fresh_self, _ = decode_step_by_step(self_attention, replayed)
    fresh_cross, _ = decode_step_by_step(cross_attention, replayed, encoder_out.index_select(1, new_order))
    assert_fp32_close(continued_self, fresh_self[before:], module_terms(self_attention, before + after),
                      name="self after reorder")
    assert_fp32_close(continued_cross, fresh_cross[before:], module_terms(cross_attention, 11),
                      name="cross after reorder")


@pytest.mark.parametrize("form", FORMS)
def test_attention_dropout_only_in_training(form):
    shared_qk, values, classes, key_padding_mask = random_case()
    queries, keys, cross_values, query_classes, key_classes, key_mask = random_cross_case()
    ops = [
        lambda **kw: SELF_FORMS[form](shared_qk, values, classes, 4, causal=True,
                                      key_padding_mask=key_padding_mask, **kw),
        lambda **kw: CROSS_FORMS[form](queries, keys, cross_values, query_classes, key_classes, 4,
                                       key_padding_mask=key_mask, **kw),
    ]
    for op in ops:
        assert torch.equal(op(dropout_p=0.5, training=False), op())  # evaluation skips dropout
        torch.manual_seed(0)
        first = op(dropout_p=0.5, training=True)
        assert torch.isfinite(first).all() and not torch.allclose(first, op(dropout_p=0.5, training=True))


def test_low_precision_inputs_use_fp32_math():
    shared_qk, values, classes, key_padding_mask = random_case()
    for dtype in (torch.bfloat16, torch.float16):
        low = lsh_self_attention(shared_qk.to(dtype), values.to(dtype), classes, 4, causal=True,
                                 key_padding_mask=key_padding_mask)
        exact = lsh_self_attention(shared_qk.to(dtype).float(), values.to(dtype).float(), classes, 4, causal=True,
                                   key_padding_mask=key_padding_mask)
        assert low.dtype == dtype
        # only the final rounding differs: the fp32 results (within fp32_tolerance of each other)
        # may round to neighbouring values of `dtype`, one ulp (eps · |value|) apart
        torch.testing.assert_close(low.float(), exact.to(dtype).float(), rtol=torch.finfo(dtype).eps,
                                   atol=op_terms(8, 23) * FP32_EPS * values.abs().max().item())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast does not reach inside the op
        inside = lsh_self_attention(shared_qk, values, classes, 4, causal=True, key_padding_mask=key_padding_mask)
        rotations = random_rotations(2, 3, 8, 4, seed=0)
        hashed_inside = hash_vectors(shared_qk, rotations)
    assert torch.equal(hashed_inside, hash_vectors(shared_qk, rotations))
    assert torch.equal(inside, lsh_self_attention(shared_qk, values, classes, 4, causal=True,
                                                  key_padding_mask=key_padding_mask))
    module = LSHSelfAttention(16, 2, causal=False, chunk_size=4, hash_classes=4, rounds=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = module(torch.randn(13, 2, 16))[0]
    assert output.dtype == torch.bfloat16 and torch.isfinite(output).all()


# ---- the registered model --------------------------------------------------------------------


def lsh_model(*options):
    dictionary, separator = toy_dictionary(30)
    model = build_model("lsh_doc_transformer_tiny", dictionary_task(dictionary, separator),
                        "--dropout", "0", "--share-all-embeddings", *options, seed=0)
    return model, dictionary


def source_batch(dictionary, batch=3, time=19):
    generator = torch.Generator().manual_seed(4)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (batch, time), generator=generator)
    tokens[:, -1] = dictionary.eos()
    tokens[1, -5:] = dictionary.pad()
    tokens[1, -6] = dictionary.eos()
    return tokens, tokens.ne(dictionary.pad()).sum(1)


ALL_THREE = ["--lsh-attention", "encoder-self,decoder-self,cross", "--lsh-rounds", "2"]


def test_model_uses_lsh_where_asked_with_its_own_rotations_per_layer():
    model, _ = lsh_model(*ALL_THREE)
    seeds = set()
    for layer in model.encoder.layers:
        assert isinstance(layer.self_attn, LSHSelfAttention) and not layer.self_attn.causal
        seeds.add(layer.self_attn.seed)
    for layer in model.decoder.layers:
        assert isinstance(layer.self_attn, LSHSelfAttention) and layer.self_attn.causal
        assert isinstance(layer.encoder_attn, LSHCrossAttention)
        seeds |= {layer.self_attn.seed, layer.encoder_attn.seed}
    assert len(seeds) == 6
    self_only, _ = lsh_model("--lsh-attention", "encoder-self,decoder-self")
    assert not isinstance(self_only.decoder.layers[0].encoder_attn, LSHCrossAttention)
    with pytest.raises(ValueError, match="unknown"):
        lsh_model("--lsh-attention", "encoder")


def test_checkpoint_round_trip_keeps_rotations_and_outputs(tmp_path):
    model, dictionary = lsh_model(*ALL_THREE, "--lsh-chunk-size", "4")
    source, lengths = source_batch(dictionary)
    target = source[:, :12].clone()
    target[:, 0] = dictionary.eos()
    expected = model(source, lengths, target)[0]
    torch.save(model.state_dict(), tmp_path / "model.pt")
    reloaded, _ = lsh_model(*ALL_THREE, "--lsh-chunk-size", "4", "--lsh-seed", "99")  # other rotations
    assert not torch.equal(reloaded.encoder.layers[0].self_attn.rotations, model.encoder.layers[0].self_attn.rotations)
    reloaded.load_state_dict(torch.load(tmp_path / "model.pt"))
    assert torch.equal(reloaded(source, lengths, target)[0], expected)  # same weights, same computation


def test_decoder_token_by_token_equals_one_forward_pass():
    """With chunks that hold the whole window the training form is exactly what decoding computes."""
    model, dictionary = lsh_model(*ALL_THREE, "--lsh-chunk-size", "64")
    source, lengths = source_batch(dictionary)
    target = torch.randint(dictionary.nspecial, len(dictionary), (3, 15), generator=torch.Generator().manual_seed(5))
    target[:, 0] = dictionary.eos()
    with torch.no_grad():
        full = model(source, lengths, target)[0]
        encoder_out = model.encoder(source, lengths)
        state = {}
        stepped = torch.cat([model.decoder(target[:, :t + 1], encoder_out=encoder_out, incremental_state=state)[0]
                             for t in range(target.shape[1])], dim=1)
    assert_fp32_close(stepped, full, model_terms(source.shape[1], target.shape[1]), name="token by token vs full")


def test_beam_search_scores_equal_teacher_forced_scores():
    from fairseq.sequence_generator import SequenceGenerator

    model, dictionary = lsh_model(*ALL_THREE, "--lsh-chunk-size", "64")
    source, lengths = source_batch(dictionary)
    generator = SequenceGenerator([model], dictionary, beam_size=3, max_len_a=0, max_len_b=8)
    hypotheses = generator.generate([model], {"net_input": {"src_tokens": source, "src_lengths": lengths}})
    for row, beam in enumerate(hypotheses):
        best = beam[0]
        prev_output_tokens = torch.cat([torch.tensor([dictionary.eos()]), best["tokens"][:-1]]).unsqueeze(0)
        with torch.no_grad():
            logits = model(source[row:row + 1, :lengths[row]], lengths[row:row + 1], prev_output_tokens)[0]
        log_probs = torch.log_softmax(logits.float(), -1)[0].gather(-1, best["tokens"].unsqueeze(-1)).squeeze(-1)
        assert_fp32_close(best["positional_scores"], log_probs, model_terms(source.shape[1], 8, len(dictionary)),
                          name="beam scores vs teacher forcing")


def test_activation_checkpointing_recomputes_the_same_shuffle():
    """--checkpoint-activations reruns each layer's forward pass in the backward pass: the
    cross-attention shuffle (drawn from (layer seed, update)) must come out the same."""
    gradients = []
    for options in ([], ["--checkpoint-activations"]):
        model, dictionary = lsh_model(*ALL_THREE, "--lsh-chunk-size", "4", *options)
        model.train()
        model.set_num_updates(7)
        source, lengths = source_batch(dictionary)
        target = source[:, :12].clone()
        target[:, 0] = dictionary.eos()
        model(source, lengths, target)[0].pow(2).mean().backward()
        gradients.append([p.grad for p in model.parameters() if p.grad is not None])
    # the backward pass runs each sum again, transposed, and sums over the 3 x 12 positions
    terms = 2 * model_terms(source.shape[1], 12) + 36
    largest = max(g.abs().max().item() for g in gradients[0])
    for plain, recomputed in zip(*gradients):
        assert_fp32_close(recomputed, plain, terms, largest, "gradients with activation checkpointing")
