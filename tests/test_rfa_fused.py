"""RFA's fused decoding step (modules/random_feature_attention/fused.py, triton_kernels.py) computes
what the formulas and the eager step compute: the causal step from an empty prefix, through gates
(one per head or one per feature), key weights, beam reorders and a shrinking batch, continuing a
prefix the eager step kept as keys; the cross attention's read of its source summary; bf16/fp16
inputs; the modules and a trained model's beam search; the local softmax heads' kernels (causal and
cross), module by module against the eager step and through beam search with a tiny model with
local heads trained here on the synthetic corpus.

Without a CUDA device the kernels run on CPU tensors in Triton's interpreter, which Triton chooses
when it is imported with ``TRITON_INTERPRET=1`` (and checks again when it imports parts of itself
later): the variable is set for that import, here, and while this file's tests run, and restored
after each, so that no other test file, nor a command one starts, sees it. That the same kernels
compile for an H100 is checked by Triton's compiler, which needs no GPU (in a process of its own,
without the interpreter). Triton is a GPU-side dependency (the ``gpu`` extra): without it these
tests are skipped.
"""

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import assert_fp32_close, build_model, fp32_tolerance, low_precision_tolerance, transformer_terms

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# on a CPU: Triton's interpreter, for the import of Triton and the kernels' definitions here, and
# while this file's tests run (interpreter_mode)
INTERPRETER = {"TRITON_INTERPRET": "1"} if DEVICE == "cpu" else {}


def _set_environment(values):
    previous = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return previous


_previous = _set_environment(INTERPRETER)
try:
    pytest.importorskip("triton", reason="Triton is not installed (the 'gpu' extra): the fused decoding kernels "
                                         "are tested only with it")
    from rfa_doc_mt.modules.random_feature_attention import triton_kernels  # noqa: F401  (defined as interpreted)
finally:
    _set_environment(_previous)

from fairseq import checkpoint_utils, search  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.sequence_generator import SequenceGenerator  # noqa: E402

import rfa_doc_mt  # noqa: E402, F401  (registers the task and models)
from rfa_doc_mt.data.synthetic import generate_documents, translate_document  # noqa: E402
from rfa_doc_mt.models.build import dictionary_task  # noqa: E402
from rfa_doc_mt.modules.random_feature_attention import (  # noqa: E402
    RandomFeatureCausalAttention,
    RandomFeatureCrossAttention,
    causal_decoding_step,
    orthogonal_random_matrices,
)
from rfa_doc_mt.modules.random_feature_attention import fused as fused_module  # noqa: E402
from rfa_doc_mt.modules.random_feature_attention.features import (  # noqa: E402
    MIN_TAU,
    UNIT_NORM_FLOOR,
    DecodingFeatureMap,
    unit_vectors,
)
from rfa_doc_mt.modules.random_feature_attention.fused import (  # noqa: E402
    fused_causal_step,
    fused_cross_read,
    uses_fused_decoding,
)
from rfa_doc_mt.modules.random_feature_attention.layers import set_decoding_path  # noqa: E402
from rfa_doc_mt.modules.random_feature_attention.state import NORMALISER_FLOOR, column_major_state  # noqa: E402
from rfa_doc_mt.modules.sentences import sentence_ids, sentence_starts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "interpreter_mode")


@pytest.fixture(scope="module")
def interpreter_mode():
    previous = _set_environment(INTERPRETER)
    yield
    _set_environment(previous)


PAD, SEP = 1, 3
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
# tiny sizes (the interpreter runs every program in Python): 2 heads of 8, 4 projections; the
# kernels' loop over blocks of 64 features is run at larger sizes too (FEATURE_BLOCKS)
HEADS, HEAD_DIM, PROJECTIONS = 2, 8, 4
# (feature map, projections): 80 features (a full block and a partial one), 100 (positive: 64 + 36),
# and the paper's sizes: 128 causal features (two full blocks), 512 cross (eight)
FEATURE_BLOCKS = [("fourier", 40), ("positive", 100), ("fourier", 64)]
# the cross read's loop takes blocks of 64 projections (with the fourier map, their sines and cosines)
CROSS_FEATURE_BLOCKS = FEATURE_BLOCKS + [("fourier", 100), ("fourier", 256)]
# roundings of one feature besides its angle's sum: the unit vector's division and square root,
# sin/cos/exp (each within 2 ulps: numpy's and CUDA's libm), the scale
FEATURE_ROUNDINGS = 6


def feature_map(name, seed=0, projections=PROJECTIONS):
    generator = torch.Generator().manual_seed(seed)
    matrix = orthogonal_random_matrices(generator, 1, HEADS, projections, HEAD_DIM)[0]
    tau = torch.rand(HEADS, generator=generator) + 0.6
    return DecodingFeatureMap.build(name, matrix, tau), matrix, tau


def to_device(feature):
    return DecodingFeatureMap("fourier" if feature.sine else "positive", feature.weight.to(DEVICE),
                              feature.offset.to(DEVICE))


def features64(units, matrix, tau, name):
    """φ(x̂) in float64 from the formula (features.py): units [..., head_dim] per head on dim -2."""
    projection = matrix.double() / tau.double().clamp_min(MIN_TAU).view(-1, 1, 1)  # [heads, D, head_dim]
    angles = torch.einsum("...hd,hjd->...hj", units, projection)
    scale = 1 / math.sqrt(matrix.size(1))
    if name == "fourier":
        return torch.cat([angles.sin(), angles.cos()], dim=-1) * scale
    return torch.exp(angles - tau.double().clamp_min(MIN_TAU).pow(-2).view(-1, 1)) * scale


def units64(x):
    x = x.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(UNIT_NORM_FLOOR)


def feature_error_scale(phi, matrix, tau, name):
    """The size against which a feature's rounding is relative, per feature: its angle sums
    head_dim terms x̂_d w_jd/τ, whose rounding is relative to |w_j|/τ (Cauchy-Schwarz, |x̂| = 1), and
    sin/cos move by at most that (times the scale), exp by that relative to its value."""
    row_norms = (matrix.double().norm(dim=-1) / tau.double().clamp_min(MIN_TAU).view(-1, 1))  # [heads, D]
    angle_scale = row_norms.clamp_min(1.0)
    if name == "fourier":
        per_feature = torch.cat([angle_scale, angle_scale], dim=-1) / math.sqrt(matrix.size(1))
        return per_feature.expand_as(phi)
    return phi.abs() * angle_scale


def readout64(phi_q, state):
    """out = (φ(q) S)[:dv] / max((φ(q) S)[dv], floor) in float64: phi_q [..., F], state [..., F, dv + 1]."""
    read = torch.einsum("...f,...fc->...c", phi_q, state)
    return read[..., :-1] / read[..., -1:].clamp_min(NORMALISER_FLOOR)


def readout_magnitude(phi_q, error_q, state, abs_state, out):
    """The size of the terms behind a normalised readout's rounding, per output: Σ_f e_f (|S_fc| +
    |out_c| |z_f|) / den, with e_f = max(|φ_f|, the size of feature f's rounding), |S| and |z| the
    state's sums of absolute values and den the (floored) normaliser: a first-order bound on how the
    roundings of the features, the numerator and the normaliser reach the quotient (a Fourier
    normaliser near its floor makes it large: the readout is then ill-conditioned)."""
    error_q = torch.maximum(phi_q.abs(), error_q)
    numerator = torch.einsum("...f,...fc->...c", error_q, abs_state[..., :-1])
    normaliser = torch.einsum("...f,...f->...", error_q, abs_state[..., -1]).unsqueeze(-1)
    denominator = torch.einsum("...f,...f->...", phi_q, state[..., -1]).clamp_min(NORMALISER_FLOOR).unsqueeze(-1)
    return (numerator + out.abs() * normaliser) / denominator


def assert_within_rounding(actual, expected, terms, magnitude, name, extra=0.0):
    """|actual - expected| <= fp32_tolerance(terms, magnitude) + extra, element by element
    (``magnitude``: a tensor of each element's size of terms, conftest's convention per element)."""
    bound = fp32_tolerance(terms, 1.0) * magnitude + extra
    difference = (actual.detach().double().cpu() - expected.double()).abs()
    assert torch.isfinite(actual).all()
    worst = (difference / bound).max().item()
    print(f"[fp32] {name}: largest difference {difference.max().item():.3g}, at most {worst:.2g} of its bound "
          f"({terms} terms, sizes up to {magnitude.max().item():.3g})")
    assert worst <= 1.0, f"{name}: a difference beyond its rounding bound ({worst:.3g} x)"


def causal_terms(steps, features=2 * PROJECTIONS):
    """Roundings along a causal step's longest path: the unit vector (head_dim), the angle
    (head_dim), the feature (FEATURE_ROUNDINGS), the readout's sum over the features (F), the
    state's sum over the steps (each a gate, a product and a sum) and the division."""
    return 2 * HEAD_DIM + FEATURE_ROUNDINGS + features + 3 * steps + 1


class Formula:
    """Causal RFA decoding from the formula, in float64 (package docstring)::

        S_t = f_t ⊙ S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ,   out_t = (φ(q_t) S_t)[:dv] / max((φ(q_t) S_t)[dv], floor)

    with f_t one number per head or one per feature; beam search's reorders gather the rows of S.
    Also carries the state of absolute values (of the features' rounding scales and |v|), which
    bounds how far two fp32 evaluations can drift apart."""

    def __init__(self, name, matrix, tau):
        self.name, self.matrix, self.tau = name, matrix, tau
        self.state = self.abs_state = None

    def step(self, qkv, forget=None, key_weight=None):
        q, k, v = (units64(qkv[:, 0]), units64(qkv[:, 1]), qkv[:, 2].double())
        phi_q, phi_k = features64(q, self.matrix, self.tau, self.name), features64(k, self.matrix, self.tau,
                                                                                   self.name)
        error_k = feature_error_scale(phi_k, self.matrix, self.tau, self.name)
        error_q = feature_error_scale(phi_q, self.matrix, self.tau, self.name)
        if key_weight is not None:
            phi_k, error_k = phi_k * key_weight.double().unsqueeze(-1), error_k * key_weight.double().unsqueeze(-1)
        values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        added = phi_k.unsqueeze(-1) * values.unsqueeze(-2)
        abs_added = torch.maximum(phi_k.abs(), error_k).unsqueeze(-1) * values.abs().unsqueeze(-2)
        if self.state is None:
            self.state, self.abs_state = added, abs_added
        else:
            gate = 1.0 if forget is None else forget.double().view(*forget.shape[:2], -1, 1)
            self.state, self.abs_state = gate * self.state + added, gate * self.abs_state + abs_added
        out = readout64(phi_q, self.state)
        return out, readout_magnitude(phi_q, error_q, self.state, self.abs_state, out)

    def reorder(self, order):
        self.state, self.abs_state = self.state[order], self.abs_state[order]


def random_gates(kind, batch, generator, features):
    if kind == "none":
        return None, None
    key_weight = torch.rand(batch, HEADS, generator=generator)
    if kind == "head":
        return torch.rand(batch, HEADS, generator=generator), key_weight
    return torch.rand(batch, HEADS, features, generator=generator), key_weight  # one gate per feature


def on_device(x):
    return None if x is None else x.to(DEVICE)


# ---------------------------------------------------------------------------------------
# the causal step


@pytest.mark.parametrize("name,gates,projections",
                         [("fourier", "none", PROJECTIONS), ("fourier", "head", PROJECTIONS),
                          ("positive", "feature", PROJECTIONS)]
                         + [(name, "feature", projections) for name, projections in FEATURE_BLOCKS])
def test_fused_causal_step_follows_the_formula_through_reorders_and_a_shrinking_batch(name, gates, projections):
    """From an empty prefix, with gates off, one per head, or one per feature, key weights, beam
    reorders (gathered on read by the next step, no copy) and rows leaving the batch; at 8 features
    (one block of the kernel's loop) and at 80-128 (two blocks, the last one partial or full)."""
    feature, matrix, tau = feature_map(name, projections=projections)
    features = feature.weight.size(-1) * (2 if feature.sine else 1)
    generator = torch.Generator().manual_seed(1)
    formula, prefix, storages = Formula(name, matrix, tau), {}, set()
    # row orders after steps 1, 2 and 4: rows swap and one is copied, then the batch shrinks to 3 rows, then to 2
    orders = {1: torch.tensor([1, 0, 0, 3]), 2: torch.tensor([2, 1, 1]), 4: torch.tensor([0, 2])}
    batch = 4
    for step in range(6):
        qkv = torch.randn(batch, 3, HEADS, HEAD_DIM, generator=generator) * 3
        forget, key_weight = random_gates(gates, batch, generator, features)
        out = fused_causal_step(qkv.to(DEVICE), to_device(feature), prefix, on_device(forget), on_device(key_weight))
        expected, magnitude = formula.step(qkv, forget, key_weight)
        assert out.shape == (batch, HEADS, HEAD_DIM) and out.dtype == torch.float32
        assert_within_rounding(out, expected, causal_terms(step + 1, features), magnitude,
                               f"{name} {gates} {features} features step {step}")
        storages.add(prefix["state"].untyped_storage().data_ptr())
        if step in orders:
            order = orders[step]
            prefix["rows"] = order.to(DEVICE)  # what the module's reorder records (composed: below)
            formula.reorder(order)
            batch = order.numel()
    # the state lives in two buffers that take turns (the gathering steps write the other)
    assert len(storages) == 2
    assert_within_rounding(prefix["state"], formula.state, causal_terms(6, features), formula.abs_state,
                           "final state")


def test_fused_causal_step_continues_a_prefix_the_eager_step_kept_as_keys():
    """The eager step keeps a short prefix as its keys and values (here 4 tokens: 8 features,
    9 columns), with a reorder not yet applied; the fused step takes over from them (their state
    built once), and the eager and fused steps agree on either side of the eager step's own switch
    to the state (after the 4th token)."""
    feature, matrix, tau = feature_map("fourier", seed=2)
    generator = torch.Generator().manual_seed(3)
    batch = 3
    formula, eager, handed = Formula("fourier", matrix, tau), {}, {}
    for step in range(7):
        qkv = torch.randn(batch, 3, HEADS, HEAD_DIM, generator=generator)
        forget, key_weight = random_gates("head", batch, generator, 8)
        expected, magnitude = formula.step(qkv, forget, key_weight)
        units = unit_vectors(qkv[:, :2].permute(2, 0, 1, 3)).reshape(HEADS, 2 * batch, HEAD_DIM)
        phi = feature(units).view(HEADS, batch, 2, -1).transpose(0, 1)
        eager_out = causal_decoding_step(phi[:, :, 0], phi[:, :, 1], qkv[:, 2], eager, forget, key_weight)
        if step == 2:  # the fused step takes over the eager prefix of 3 tokens, kept as keys
            assert eager["keys"] is not None and eager.get("state") is None
            handed = {name: on_device(value) for name, value in eager.items()}
            order = torch.tensor([2, 2, 0])
            eager["rows"], handed["rows"] = order, order.to(DEVICE)
            formula.reorder(order)
        elif step > 2:
            out = fused_causal_step(qkv.to(DEVICE), to_device(feature), handed, on_device(forget),
                                    on_device(key_weight))
            assert handed["keys"] is None and handed["state"] is not None
            assert_within_rounding(out, expected, causal_terms(step + 1), magnitude, f"fused step {step}")
            # two fp32 evaluations of the formula: within both their bounds of it
            form = "keys" if eager["keys"] is not None else "state"
            assert_within_rounding(out, eager_out, 2 * causal_terms(step + 1), magnitude,
                                   f"fused vs eager step {step} (eager: {form})")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_causal_step_takes_reduced_precision_projections(dtype):
    """q, k, v in bf16/fp16 (a model decoding in half precision): fp32 inside, the output in the
    input's dtype, within one rounding to it of the formula on the same (rounded) inputs."""
    feature, matrix, tau = feature_map("fourier", seed=4)
    generator = torch.Generator().manual_seed(5)
    formula, prefix = Formula("fourier", matrix, tau), {}
    for step in range(3):
        qkv = (torch.randn(3, 3, HEADS, HEAD_DIM, generator=generator) * 2).to(dtype)
        forget, key_weight = random_gates("head", 3, generator, 8)
        out = fused_causal_step(qkv.to(DEVICE), to_device(feature), prefix, on_device(forget), on_device(key_weight))
        expected, magnitude = formula.step(qkv.float(), forget, key_weight)
        assert out.dtype == dtype
        assert_within_rounding(out, expected, causal_terms(step + 1), magnitude, f"{dtype} step {step}",
                               extra=low_precision_tolerance(1, expected.abs().max().item(), dtype))


# ---------------------------------------------------------------------------------------
# the cross attention's read


@pytest.mark.parametrize("name,projections,precision,launch",
                         [("fourier", PROJECTIONS, "ieee", None), ("fourier", PROJECTIONS, None, None),
                          ("positive", PROJECTIONS, None, None)]
                         + [(name, projections, None, None) for name, projections in CROSS_FEATURE_BLOCKS]
                         # other launch settings (the readout benchmark's sweep): 7 blocks of 16, the last
                         # partial; blocks of 32; one block of 128 on 8 warps in 2 stages (a GPU's choices)
                         + [("fourier", 100, None, {"block": 16}), ("positive", 100, None, {"block": 32}),
                            ("fourier", 256, None, {"block": 128, "num_warps": 8, "num_stages": 2})])
def test_fused_cross_read_follows_the_formula_for_the_sources_still_decoding(name, projections, precision, launch):
    """Each source's beams read its summary ([S, z], any layout); sources that finished are skipped
    by reading the summary rows of the others (``rows``); a summary kept as keys is read through
    its state. At 4 projections (one block of the kernel's loop) and at 40-256 (one to four blocks
    of 64, the last one partial or full; with the fourier map each block's sines and cosines); the
    products in fp32 (``"ieee"``) and at the default precision (3xTF32 on a GPU; Triton's
    interpreter takes both in fp32)."""
    feature, matrix, tau = feature_map(name, seed=6, projections=projections)
    features = feature.weight.size(-1) * (2 if feature.sine else 1)
    generator = torch.Generator().manual_seed(7)
    stored, beams, source = 4, 3, 5
    phi_k = torch.rand(stored, HEADS, source, features, generator=generator)
    values = torch.cat([torch.randn(stored, HEADS, source, HEAD_DIM, generator=generator),
                        torch.ones(stored, HEADS, source, 1)], dim=-1) * torch.rand(stored, HEADS, source, 1,
                                                                                    generator=generator)
    state = phi_k.transpose(-1, -2) @ values  # [stored, heads, F, dv + 1]
    abs_state = phi_k.double().transpose(-1, -2) @ values.double().abs()
    for rows, summary in ((None, {"state": state}),
                          (torch.tensor([3, 1]), {"state": column_major_state(state.transpose(-1, -2).contiguous())}),
                          (torch.tensor([2]), {"keys": phi_k, "values": values})):
        sources = stored if rows is None else rows.numel()
        q = torch.randn(sources * beams, HEADS, HEAD_DIM, generator=generator) * 2
        summary = {key: value.to(DEVICE) for key, value in summary.items()}
        out = fused_cross_read(q.to(DEVICE), to_device(feature), summary, on_device(rows), precision=precision,
                               launch=launch).cpu()
        phi_q = features64(units64(q), matrix, tau, name).view(sources, beams, HEADS, -1)
        read = state.double() if rows is None else state.double()[rows]
        read_abs = abs_state if rows is None else abs_state[rows]
        expected = readout64(phi_q, read.unsqueeze(1))  # [sources, beams, heads, dv]
        magnitude = readout_magnitude(phi_q, feature_error_scale(phi_q, matrix, tau, name), read.unsqueeze(1),
                                      read_abs.unsqueeze(1), expected)
        # the keys form's state is built here: the source's sum (5 terms) comes first
        terms = 2 * HEAD_DIM + FEATURE_ROUNDINGS + features + (source if "keys" in summary else 0) + 1
        if DEVICE == "cuda" and fused_module._cross_precision(precision) == "tf32x3":
            # 3xTF32 drops the product of the operands' small parts: 2^-22 of each product, 4 fp32 roundings
            terms *= 4
        assert_within_rounding(out.view(sources, beams, HEADS, HEAD_DIM), expected, terms, magnitude,
                               f"cross read {name} rows={rows}")


def test_a_cross_read_whose_split_products_do_not_compile_falls_back_to_fp32(monkeypatch, caplog):
    """A Triton that cannot compile the 3xTF32 products: the read is taken with fp32 products
    instead, the same output, with a warning, and later reads go to fp32 products at once."""
    feature, _, _ = feature_map("fourier", seed=6)
    generator = torch.Generator().manual_seed(8)
    features = 2 * feature.weight.size(-1)
    state = {"state": (torch.rand(2, HEADS, features, HEAD_DIM + 1, generator=generator)).to(DEVICE)}
    q = (torch.randn(2 * 3, HEADS, HEAD_DIM, generator=generator)).to(DEVICE)
    expected = fused_cross_read(q, to_device(feature), state, precision="ieee")
    launched = []
    real_launch = fused_module._launch

    def launch(kernel, grid, *args, **options):
        launched.append(options["DOT_PRECISION"])
        if options["DOT_PRECISION"] == "tf32x3":
            raise RuntimeError("no split products here")
        real_launch(kernel, grid, *args, **options)

    monkeypatch.setattr(fused_module, "_launch", launch)
    monkeypatch.setattr(fused_module, "_FAILED_PRECISIONS", set())
    with caplog.at_level("WARNING"):
        out = fused_cross_read(q, to_device(feature), state, precision="tf32x3")
    assert launched == ["tf32x3", "ieee"] and torch.equal(out, expected)
    assert "could not be compiled with tf32x3 products" in caplog.text and "no split products here" in caplog.text
    fused_cross_read(q, to_device(feature), state, precision="tf32x3")
    assert launched == ["tf32x3", "ieee", "ieee"]
    with pytest.raises(ValueError, match="'ieee' or 'tf32x3'"):
        fused_cross_read(q, to_device(feature), state, precision="tf32")


@pytest.mark.parametrize("launch", [{"block": 24}, {"block": 8}, {"num_warp": 4}])
def test_a_cross_read_refuses_launch_settings_it_does_not_take(launch):
    feature, _, _ = feature_map("fourier", seed=6)
    state = {"state": torch.rand(2, HEADS, 2 * feature.weight.size(-1), HEAD_DIM + 1).to(DEVICE)}
    with pytest.raises(ValueError, match="launch takes a block"):
        fused_cross_read(torch.randn(6, HEADS, HEAD_DIM).to(DEVICE), to_device(feature), state, launch=launch)


def test_configured_cross_read_settings_are_the_default_and_dropped_where_they_fail(monkeypatch, caplog):
    """CROSS_READ_LAUNCH (a GPU's sweep's choice) is what a call without settings launches with; a
    call they fail for takes the defaults instead, the same output, with a warning, and so does
    every later call."""
    feature, _, _ = feature_map("fourier", seed=6, projections=100)
    state = {"state": torch.rand(2, HEADS, 200, HEAD_DIM + 1).to(DEVICE)}
    q = torch.randn(6, HEADS, HEAD_DIM).to(DEVICE)
    expected = fused_cross_read(q, to_device(feature), state)
    monkeypatch.setattr(fused_module, "CROSS_READ_LAUNCH", {"block": 32, "num_warps": 8})
    launched = []
    real_launch = fused_module._launch

    def launch(kernel, grid, *args, **options):
        launched.append((options["BLOCK_FEATURES"], options.get("num_warps")))
        if options.get("num_warps") == 8 and options["BLOCK_FEATURES"] == 16:
            raise RuntimeError("out of resources")
        real_launch(kernel, grid, *args, **options)

    monkeypatch.setattr(fused_module, "_launch", launch)
    assert torch.allclose(fused_cross_read(q, to_device(feature), state), expected, rtol=1e-5, atol=1e-6)
    assert launched == [(32, 8)]
    fused_module.CROSS_READ_LAUNCH["block"] = 16
    with caplog.at_level("WARNING"):
        out = fused_cross_read(q, to_device(feature), state)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6) and "launch settings" in caplog.text
    assert launched[1:] == [(16, 8), (fused_module.FEATURE_BLOCK, None)] and fused_module.CROSS_READ_LAUNCH == {}


@pytest.mark.parametrize("text, launch", [("block=64,num_warps=8,num_stages=3", {"block": 64, "num_warps": 8,
                                                                                   "num_stages": 3}),
                                          (" num_warps=4 ", {"num_warps": 4}), ("", {})])
def test_cross_read_settings_parse_from_the_command_line(text, launch):
    assert fused_module.parse_cross_read_launch(text) == launch


@pytest.mark.parametrize("text", ["block=48", "warps=8", "block=64,num_stages=x", "num_warps=0"])
def test_cross_read_settings_that_the_kernel_does_not_take_are_refused(text):
    with pytest.raises(ValueError):
        fused_module.parse_cross_read_launch(text)


def test_a_cross_reads_launch_settings_reach_the_kernel(monkeypatch):
    """What a sweep sets is what the kernel is launched with; without settings, the defaults (a
    block of up to FEATURE_BLOCK projections, Triton's warps and stages)."""
    feature, _, _ = feature_map("fourier", seed=6, projections=100)
    state = {"state": torch.rand(2, HEADS, 200, HEAD_DIM + 1).to(DEVICE)}
    q = torch.randn(6, HEADS, HEAD_DIM).to(DEVICE)
    launched = []
    monkeypatch.setattr(fused_module, "_launch", lambda kernel, grid, *args, **options: launched.append(options))
    fused_cross_read(q, to_device(feature), state, launch={"block": 32, "num_warps": 8, "num_stages": 2})
    fused_cross_read(q, to_device(feature), state)
    assert [(o["BLOCK_FEATURES"], o.get("num_warps"), o.get("num_stages")) for o in launched] == [
        (32, 8, 2), (fused_module.FEATURE_BLOCK, None, None)]


# ---------------------------------------------------------------------------------------
# the modules, and the path each takes


def causal_module(gate):
    torch.manual_seed(3)
    return RandomFeatureCausalAttention(16, HEADS, PROJECTIONS, seed=11, gate=gate).eval()


def cross_module():
    torch.manual_seed(0)
    return RandomFeatureCrossAttention(16, HEADS, PROJECTIONS, seed=3, kdim=12).eval()


def module_terms(module, time):
    """As test_rfa.causal_module_terms: the projections, the unit vectors and angles, the features
    and the keys; twice, for two fp32 evaluations that each lie within it of the exact value."""
    return 2 * (2 * module.embed_dim + 2 * module.head_dim + module.features + time + FEATURE_ROUNDINGS)


# ---------------------------------------------------------------------------------------
# the training form's Fourier features, fused (fused_features.py)


def formula_features64(x, matrix, tau):
    """The Fourier features of x [lead, heads, time, head_dim] in float64 with autograd: the unit
    vectors floored as features.py floors them, then [sin P, cos P] / √D with P = x̂ (W/τ)ᵀ."""
    units = x / x.norm(dim=-1, keepdim=True).clamp_min(UNIT_NORM_FLOOR)
    projection = matrix.double() / tau.clamp_min(MIN_TAU).view(-1, 1, 1)
    angles = torch.einsum("lhtd,hjd->lhtj", units, projection)
    return torch.cat([angles.sin(), angles.cos()], dim=-1) / math.sqrt(matrix.size(1))


@pytest.mark.parametrize("projections", [PROJECTIONS, 40, 100], ids=["one block", "a partial block", "two blocks"])
def test_fused_training_features_and_their_gradients_follow_the_formula(projections):
    """The kernels of the training form's Fourier features, forward and backward, against the formula
    in float64 with autograd: from a permuted input with rows over two blocks of the kernel, a zero
    row and one below the norms' floor (whose gradient is g / floor); the gradients of the input and
    of a learned τ, one of them held at its clamp (no gradient)."""
    from rfa_doc_mt.modules.random_feature_attention.fused_features import ROWS_BLOCK, fused_fourier_features

    generator = torch.Generator().manual_seed(4)
    lead, time = 3, ROWS_BLOCK // 2 + 1  # 51 rows per head: two blocks, the second partial
    matrix = orthogonal_random_matrices(generator, 1, HEADS, projections, HEAD_DIM)[0]
    tau = torch.tensor([0.8, MIN_TAU / 2])
    x = 3 * torch.randn(lead, time, HEADS, HEAD_DIM, generator=generator)
    x[0, 1] = 0.0
    x[2, 3, 1] *= 1e-7 / x[2, 3, 1].norm()
    x = x.permute(0, 2, 1, 3)  # [lead, heads, time, head_dim], not contiguous
    x32, tau32 = x.to(DEVICE).requires_grad_(), tau.to(DEVICE).requires_grad_()
    from rfa_doc_mt.modules.random_feature_attention.features import projection_of

    got = fused_fourier_features(x32, projection_of(matrix.to(DEVICE), tau32))
    x64, tau64 = x.double().requires_grad_(), tau.double().requires_grad_()
    expected = formula_features64(x64, matrix, tau64)
    assert got.shape == (lead, HEADS, time, 2 * projections) and got.dtype == torch.float32
    error_scale = feature_error_scale(expected.detach().transpose(1, 2), matrix, tau, "fourier").transpose(1, 2)
    assert_within_rounding(got, expected.detach(), HEAD_DIM + FEATURE_ROUNDINGS, error_scale, "fused features")
    weights = torch.randn(got.shape, generator=generator, dtype=torch.float64)
    want = torch.autograd.grad((expected * weights).sum(), (x64, tau64))
    have = torch.autograd.grad((got * weights.float().to(DEVICE)).sum(), (x32, tau32))
    assert float(have[1][1]) == 0.0 and float(have[1][0]) != 0.0  # τ held at its clamp: no gradient
    floored = x.norm(dim=-1) < UNIT_NORM_FLOOR
    assert int(floored.sum()) == 3  # a zero row in each head, one below the floor
    # a unit vector's gradient sums 2D angle gradients of size |g| |w|/τ per head (each a product
    # of two roundings of features), through head_dim more: relative to that size over the row's norm
    clamped = tau.clamp_min(MIN_TAU)
    angle_size = matrix.norm(dim=-1).max(dim=-1).values / clamped * weights.abs().max().item()  # [heads]
    norms = x.norm(dim=-1, keepdim=True).clamp_min(UNIT_NORM_FLOOR)
    assert_within_rounding(have[0], want[0], 2 * projections + HEAD_DIM + FEATURE_ROUNDINGS,
                           (angle_size.view(1, -1, 1, 1) / norms).expand(x.shape), "input gradient")
    # τ's gradient sums the angle gradients times their angles over its head's rows and projections,
    # each of size |g| |P| / τ with |P| <= |w| / τ
    terms = 2 * projections + lead * time * projections
    assert_within_rounding(have[1], want[1], terms, angle_size / clamped, "tau gradient")


def test_the_training_features_take_the_kernels_where_they_run_and_the_torch_form_elsewhere(monkeypatch, caplog):
    """A module's training step with the fused features (the CPU added to their devices, under the
    interpreter) gives the torch form's outputs and gradients; a Triton whose kernels fail their
    first check leaves the torch form in place, with a warning; inputs of other ranks and devices
    never take the kernels."""
    from rfa_doc_mt.modules.random_feature_attention import features as features_module
    from rfa_doc_mt.modules.random_feature_attention import fused_features

    torch.manual_seed(3)
    # eval: the fixed evaluation matrix in both forwards (training draws one per forward)
    module = RandomFeatureCausalAttention(16, HEADS, PROJECTIONS, seed=11, learned_tau=True).eval()
    generator = torch.Generator().manual_seed(12)
    query = torch.randn(20, 3, 16, generator=generator, dtype=torch.float64).float().to(DEVICE)
    module = module.to(DEVICE)
    counted = []
    real_apply = fused_features._FusedFourierFeatures.apply

    def counting_apply(*args):
        counted.append(args[0].shape)
        return real_apply(*args)

    monkeypatch.setattr(fused_features._FusedFourierFeatures, "apply", counting_apply)
    results = []
    for devices in ({"cuda"}, {"cuda", DEVICE}):
        monkeypatch.setattr(features_module, "FUSED_FEATURE_DEVICES", devices)
        inputs = query.clone().requires_grad_()
        out, _ = module(inputs)
        results.append((out, *torch.autograd.grad(out.square().sum(), (inputs, module.tau))))
    assert len(counted) >= 2  # queries and keys, in the second step only (and the first check's)
    for name, plain, fused in zip(("output", "input gradient", "tau gradient"), *results):
        assert torch.allclose(fused, plain, rtol=1e-4, atol=1e-5), name
    # a kernel that fails its check: the torch form, with a warning (the readout's and the
    # temperature's kernels checked anew too)
    monkeypatch.setattr(fused_features, "_CHECKED", {})
    monkeypatch.setattr(fused_features, "_CHECKED_NORMALISE", {})
    monkeypatch.setattr(fused_features, "_CHECKED_INVERSE_TAU", {})
    monkeypatch.setattr(fused_features, "_launch", lambda *args, **options: (_ for _ in ()).throw(
        RuntimeError("no kernel here")))
    with caplog.at_level("WARNING"):
        assert not fused_features.fused_features_work(torch.device(DEVICE))
    assert "do not run here" in caplog.text and "no kernel here" in caplog.text
    counted.clear()
    out, _ = module(query)
    assert counted == [] and torch.isfinite(out).all()


def test_fused_training_readout_and_its_gradient_follow_the_formula():
    """The floored readout's kernels (numerator / max(mass, floor), forward and backward) against
    the formula in float64 with autograd: a time-sliced view (rows of two blocks, the second
    partial), masses above, below and far below the floor (below it, the mass gets no gradient)."""
    from rfa_doc_mt.modules.random_feature_attention.fused_features import NORMALISE_ROWS_BLOCK, fused_normalised
    from rfa_doc_mt.modules.random_feature_attention.state import NORMALISER_FLOOR

    generator = torch.Generator().manual_seed(5)
    time, columns = NORMALISE_ROWS_BLOCK + 9, HEAD_DIM
    full = torch.randn(3, HEADS, time + 7, columns + 1, generator=generator, dtype=torch.float64)
    full[..., -1] = full[..., -1].abs() * 3 + NORMALISER_FLOOR * 1.01  # masses above the floor...
    full[0, 1, 4, -1] = NORMALISER_FLOOR / 2  # ...one below it
    full[2, 0, time - 1, -1] = 1e-9  # and one far below, in the partial block
    x = full[:, :, :time]  # [3, heads, time, columns + 1], its rows strided past the slice
    x32 = x.float().to(DEVICE).requires_grad_()
    got = fused_normalised(x32)
    x64 = x.clone().requires_grad_()
    expected = x64[..., :-1] / x64[..., -1:].clamp_min(NORMALISER_FLOOR)
    assert got.shape == (3, HEADS, time, columns) and got.dtype == torch.float32
    # the input's rounding to fp32 (numerator and mass) and one division
    assert_within_rounding(got, expected.detach(), 3, expected.detach().abs(), "fused readout")
    weights = torch.randn(got.shape, generator=generator, dtype=torch.float64)
    (want,) = torch.autograd.grad((expected * weights).sum(), x64)
    (have,) = torch.autograd.grad((got * weights.float().to(DEVICE)).sum(), x32)
    floored = x[..., -1:].clamp_min(NORMALISER_FLOOR)
    below = x[..., -1] < NORMALISER_FLOOR
    assert int(below.sum()) == 2 and bool((have.cpu()[..., -1][below] == 0).all())
    assert bool((have.cpu()[..., -1][~below] != 0).all())
    # the numerator's: a product and a division; the mass's: a sum of `columns` products of
    # |g| |out| / m, each from a few roundings, over the floored mass
    size = (weights.abs() / floored).expand(got.shape)
    assert_within_rounding(have[..., :-1], want[..., :-1], 4, size, "numerator gradient")
    mass_size = (weights.abs() * expected.detach().abs()).sum(-1) / floored[..., 0]
    assert_within_rounding(have[..., -1], want[..., -1], columns + 6, mass_size, "mass gradient")


def test_the_training_readout_takes_the_kernels_where_they_run(monkeypatch, caplog):
    """normalised() takes the fused readout for fp32 inputs of three or more dimensions that need a
    gradient on the fused devices, the torch form otherwise (and where the first check fails, with
    a warning); both give the same outputs and gradients."""
    from rfa_doc_mt.modules.random_feature_attention import features as features_module
    from rfa_doc_mt.modules.random_feature_attention import fused_features
    from rfa_doc_mt.modules.random_feature_attention.state import normalised

    applied = []
    real_apply = fused_features._FusedNormalised.apply
    monkeypatch.setattr(fused_features._FusedNormalised, "apply", lambda x: applied.append(x.shape) or real_apply(x))
    generator = torch.Generator().manual_seed(6)
    x = torch.rand(2, 3, 4, 9, generator=generator).to(DEVICE)
    results = []
    for devices in ({"cuda"}, {"cuda", DEVICE}):
        monkeypatch.setattr(features_module, "FUSED_FEATURE_DEVICES", devices)
        inputs = x.clone().requires_grad_()
        out = normalised(inputs)
        results.append((out, *torch.autograd.grad(out.square().sum(), inputs)))
    assert (2, 3, 4, 9) in applied
    for plain, fused in zip(*results):
        assert torch.allclose(fused, plain, rtol=1e-5, atol=1e-6)
    applied.clear()
    normalised(x)  # no gradient: the torch form
    normalised(x[0, 0].clone().requires_grad_())  # two dimensions
    normalised(x.double().requires_grad_())  # float64
    assert applied == []
    monkeypatch.setattr(fused_features, "_CHECKED_NORMALISE", {})
    monkeypatch.setattr(fused_features, "_launch", lambda *args, **options: (_ for _ in ()).throw(
        RuntimeError("no kernel here")))
    with caplog.at_level("WARNING"):
        out = normalised(x.clone().requires_grad_())
    assert "readout does not run here" in caplog.text and "no kernel here" in caplog.text
    # the first check's call (its own small input), then the torch form for x
    assert [tuple(shape) for shape in applied] == [(2, 3, 5, 17)] and torch.allclose(out, results[0][0])


def test_fused_training_temperature_and_its_gradient_follow_the_formula():
    """The learned temperature's kernels (W / max(τ, floor) per head, and τ's gradient) against the
    formula in float64 with autograd: heads of more entries than one program's block (a full block
    and a partial one), one τ held at its floor (no gradient), a gradient that reaches the kernel
    strided."""
    from rfa_doc_mt.modules.random_feature_attention.fused_features import INVERSE_TAU_BLOCK, fused_inverse_tau

    generator = torch.Generator().manual_seed(7)
    projections = INVERSE_TAU_BLOCK // HEAD_DIM + 9  # a head's W: one block and part of another
    matrix = orthogonal_random_matrices(generator, 1, 3, projections, HEAD_DIM)[0]
    tau = torch.tensor([0.8, MIN_TAU / 2, 1.7])
    tau32 = tau.to(DEVICE).requires_grad_()
    got = fused_inverse_tau(matrix.to(DEVICE), tau32)
    tau64 = tau.double().requires_grad_()
    expected = matrix.double() / tau64.clamp_min(MIN_TAU).view(-1, 1, 1)
    assert got.shape == matrix.shape and got.dtype == torch.float32
    # one division of fp32 inputs
    assert_within_rounding(got, expected.detach(), 2, expected.detach().abs(), "fused temperature")
    weights = torch.randn(projections, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    (want,) = torch.autograd.grad((expected.transpose(0, 1) * weights).sum(), tau64)
    (have,) = torch.autograd.grad((got.transpose(0, 1) * weights.float().to(DEVICE)).sum(), tau32)
    assert float(have[1]) == 0.0 and float(have[0]) != 0.0 and float(have[2]) != 0.0
    # a sum over the head's entries of products g · W/τ, then a division by τ
    size = (weights.transpose(0, 1).abs() * expected.detach().abs()).sum((1, 2)) / tau.double().clamp_min(MIN_TAU)
    assert_within_rounding(have, want, projections * HEAD_DIM + 3, size, "temperature gradient")


def test_the_training_temperature_takes_the_kernels_where_they_run(monkeypatch, caplog):
    """projection_of() takes the fused temperature for an fp32 τ that needs a gradient and a random
    matrix that does not, on the fused devices, and the torch form otherwise (and where the first
    check fails, with a warning); both give the same projections and gradients."""
    from rfa_doc_mt.modules.random_feature_attention import features as features_module
    from rfa_doc_mt.modules.random_feature_attention import fused_features
    from rfa_doc_mt.modules.random_feature_attention.features import projection_of

    applied = []
    real_apply = fused_features._FusedInverseTau.apply
    monkeypatch.setattr(fused_features._FusedInverseTau, "apply",
                        lambda matrix, tau: applied.append(tuple(matrix.shape)) or real_apply(matrix, tau))
    generator = torch.Generator().manual_seed(8)
    matrix = torch.randn(HEADS, 12, HEAD_DIM, generator=generator).to(DEVICE)
    tau = torch.tensor([0.6, 1.4]).to(DEVICE)
    results = []
    for devices in ({"cuda"}, {"cuda", DEVICE}):
        monkeypatch.setattr(features_module, "FUSED_FEATURE_DEVICES", devices)
        learned = tau.clone().requires_grad_()
        out = projection_of(matrix, learned)
        results.append((out, *torch.autograd.grad(out.square().sum(), learned)))
    assert applied == [(HEADS, 12, HEAD_DIM)]
    for plain, fused in zip(*results):
        assert torch.allclose(fused, plain, rtol=1e-5, atol=1e-6)
    applied.clear()
    projection_of(matrix, tau)  # no gradient: the torch form
    projection_of(matrix.clone().requires_grad_(), tau.clone().requires_grad_())  # the matrix's gradient
    projection_of(matrix.double(), tau.double().requires_grad_())  # float64
    assert applied == []
    monkeypatch.setattr(fused_features, "_CHECKED_INVERSE_TAU", {})
    monkeypatch.setattr(fused_features, "_launch", lambda *args, **options: (_ for _ in ()).throw(
        RuntimeError("no kernel here")))
    with caplog.at_level("WARNING"):
        out = projection_of(matrix, tau.clone().requires_grad_())
    assert "temperature does not run here" in caplog.text and "no kernel here" in caplog.text
    # the first check's call (its own small input), then the torch form
    assert applied == [(3, 40, 16)] and torch.allclose(out, results[0][0])


class CudaTensor:
    """What the choice of a decoding path reads of a tensor, as a CUDA tensor without a gradient
    has it (the choice is tested on machines without a GPU)."""

    is_cuda, requires_grad = True, False


def test_the_eager_path_stays_on_the_cpu_and_the_fused_path_is_chosen_on_cuda(monkeypatch):
    module, x = causal_module("none"), torch.randn(2, 3)
    assert not uses_fused_decoding(module, x)  # auto, CPU: eager, as before the fused path existed
    assert uses_fused_decoding(module, CudaTensor())  # auto, CUDA, with Triton: fused
    set_decoding_path(module, "fused")
    assert uses_fused_decoding(module, x)
    set_decoding_path(module, "eager")
    assert not uses_fused_decoding(module, x) and not uses_fused_decoding(module, CudaTensor())
    set_decoding_path(module, "auto")
    with torch.enable_grad():  # the kernels have no backward: a gradient keeps the eager path
        assert not uses_fused_decoding(module, x.requires_grad_())
    assert not uses_fused_decoding(module, None)
    # CUDA without Triton: eager
    monkeypatch.setattr("rfa_doc_mt.modules.random_feature_attention.fused.triton_available", lambda: False)
    assert not uses_fused_decoding(module, CudaTensor())
    with pytest.raises(ValueError):
        set_decoding_path(module, "graph")


@pytest.mark.parametrize("gate", ["none", "sgate", "sgate-avg", "token", "feature"])
def test_fused_modules_decode_as_the_eager_ones_through_beam_reorders(gate):
    """Causal (with its gate) and cross attention decode token by token on both paths, with beam
    search's reorders and sentences leaving the batch: the same outputs; the fused causal state
    is never copied by a reorder (the next step reads the recorded rows)."""
    generator = torch.Generator().manual_seed(8)
    # 4 source tokens: the eager path keeps them as keys (4 x 17 < 8 x 9), the fused one as the state
    sentences, beam, time, source = 3, 2, 7, 4
    tokens = torch.randint(4, 40, (sentences * beam, time + 1), generator=generator)
    tokens[:, 3] = SEP  # a sentence starts at step 4: the gate acts
    x = torch.randn(time, sentences * beam, 16, generator=generator)
    encoder_out = torch.randn(source, sentences, 12, generator=generator)
    padding = torch.zeros(sentences, source, dtype=torch.bool)
    padding[1, 3:] = True
    outputs = {}
    for path in ("eager", "fused"):
        causal, cross = causal_module(gate), cross_module()
        set_decoding_path(causal, path), set_decoding_path(cross, path)
        causal, cross = causal.to(DEVICE), cross.to(DEVICE)
        cross.set_beam_size(beam)
        rows = torch.arange(sentences * beam)  # which original row each row of the batch continues
        state, steps = {}, []
        with torch.no_grad():
            for t in range(time):
                starts = sentence_starts(tokens[rows, max(0, t - 1):t + 1], SEP)[:, -1:]
                causal.hand_in(sentence_starts=starts.to(DEVICE))
                query = x[t:t + 1, rows].to(DEVICE)
                out, _ = causal(query, query, query, incremental_state=state)
                expand = rows // beam
                read, _ = cross(query, encoder_out[:, expand].to(DEVICE), key_padding_mask=padding[expand].to(DEVICE),
                                incremental_state=state)
                steps.append(torch.cat([out, read], -1).cpu())
                # beams swap inside each sentence; after step 3 sentence 1 finishes
                order = torch.arange(rows.numel()).view(-1, beam).flip(-1)
                if t == 3:
                    order = order[[0, 2]]
                order = order.reshape(-1)
                buffer = causal._get_input_buffer(state)
                # the fused path keeps states from the first token (the eager one: keys, for 4 tokens)
                assert (buffer.get("state") is not None) == (path == "fused" or t >= 4)
                assert (cross._get_input_buffer(state).get("keys") is None) == (path == "fused")
                before = None if buffer.get("state") is None else buffer["state"].data_ptr()
                # after step 5 two reorders before the next step (the beams swap twice): the rows
                # recorded are composed
                swap = torch.arange(order.numel()).view(-1, beam).flip(-1).reshape(-1)
                for reorder in [order] + ([swap] if t == 5 else []):
                    causal.reorder_incremental_state(state, reorder.to(DEVICE))
                    cross.reorder_incremental_state(state, reorder.to(DEVICE))
                    rows = rows[reorder]
                if path == "fused" and before is not None:
                    assert causal._get_input_buffer(state)["state"].data_ptr() == before  # rows recorded, no copy
                causal.hand_in()
        outputs[path] = steps
    terms = module_terms(causal, time)
    for t, (eager, fused) in enumerate(zip(outputs["eager"], outputs["fused"])):
        assert_fp32_close(fused, eager, terms, name=f"{gate} step {t} fused vs eager")


# ---------------------------------------------------------------------------------------
# local softmax heads (local.py) on the fused path

# 4 heads of 8, the first 2 local (softmax over the current sentence), the other 2 RFA
LOCAL_EMBED, LOCAL_HEADS, LOCAL = 32, 4, 2
# roundings of a local head's output besides its sums: the scale, the exponential, the subtraction
# of the running maximum and the division
SOFTMAX_ROUNDINGS = 4


def local_modules():
    """A causal (RFA-sgate) and a cross attention of 4 heads of 8, 2 of them local, their output projections
    the identity, so that each head's output is compared with its own bound."""
    torch.manual_seed(3)
    causal = RandomFeatureCausalAttention(LOCAL_EMBED, LOCAL_HEADS, PROJECTIONS, seed=11, gate="sgate",
                                          local_heads=LOCAL).eval()
    torch.manual_seed(0)
    cross = RandomFeatureCrossAttention(LOCAL_EMBED, LOCAL_HEADS, PROJECTIONS, seed=3, kdim=12,
                                        local_heads=LOCAL).eval()
    for module in (causal, cross):
        with torch.no_grad():
            module.out_proj.weight.copy_(torch.eye(LOCAL_EMBED))
            module.out_proj.bias.zero_()
    return causal, cross


def local_softmax_terms(head_dim, keys, block):
    """Roundings along a local head's output (the eager and fused forms, each within them of the
    exact value): the score's dot product (head_dim), the softmax's sum and the weighted sum of the
    values (``keys`` each), the online softmax's rescaling of both sums once per block of keys, and
    :data:`SOFTMAX_ROUNDINGS`. The projections are one computation shared by both paths."""
    return head_dim + 2 * keys + 2 * math.ceil(keys / block) + SOFTMAX_ROUNDINGS


def local_softmax_magnitude(q, k, v):
    """The size of the terms of a local head's output (tests/test_rfa_local.softmax_magnitude): the
    values, times the largest score bound |q||k|/√d (a score's rounding error moves its weight
    relatively by as much)."""
    scores = q.norm(dim=-1).max() * k.norm(dim=-1).max() * q.size(-1) ** -0.5
    return v.abs().max().item() * max(1.0, scores.item())


def local_case(generator):
    """5 sentences x beam 2 decoding 14 tokens, sources of 15 tokens in 1-4 sentences (one padded on
    the left, as fairseq pads sources, one on the right). Target separators at steps that differ
    between rows (the aligned sentence moves at different steps, and past the source's last
    sentence in some rows)."""
    sentences, beam, time, source = 5, 2, 14, 15
    tokens = torch.randint(4, 40, (sentences * beam, time + 1), generator=generator)
    for row, cuts in enumerate([(2, 9), (4,), (1, 5, 8, 11), (6, 7), (3, 10), (2, 4, 6, 12), (5,), (8, 9, 13), (),
                                (1, 2, 3, 7)]):
        tokens[row, list(cuts)] = SEP
    src = torch.randint(4, 40, (sentences, source), generator=generator)
    src[0, [4, 9]] = SEP
    src[1, :3] = PAD  # left padding
    src[1, 8] = SEP
    src[2, [3, 6, 10]] = SEP
    src[2, 13:] = PAD
    src[4, [1, 12]] = SEP
    x = torch.randn(time, sentences * beam, LOCAL_EMBED, generator=generator)
    encoder_out = torch.randn(source, sentences, 12, generator=generator)
    return sentences, beam, time, source, tokens, src, x, encoder_out


@pytest.mark.parametrize("case", ["fused", "fused, small blocks", "fused, small blocks, loops to each length",
                                  "eager, then fused"])
def test_fused_modules_with_local_heads_decode_as_the_eager_ones(case, monkeypatch):
    """Causal and cross attention with 2 local heads decode token by token on both paths through
    beam search's reorders (beams copied and swapped, two reorders between two steps), sentences
    leaving the batch (the first of 5: the others read their sources through ``rows``; then a
    second: the sources compacted), several sentences per window (each row's aligned source
    sentence moves, and stays on the source's last when the target has more), padded sources and
    causal padding (a padding token's key is not read by later queries): the same outputs, the
    local heads' within the softmax's rounding, the RFA heads' within theirs.
    "small blocks": blocks of 4 keys and a causal buffer of 2 positions at first, so that the
    kernels' loops run over several blocks and the buffer is widened (and its counts read back) as
    sentences grow; "loops to each length": the kernels' loops run to each row's own length, as
    compiled for a GPU, not to a constexpr bound. "eager, then fused": the fused steps take over what
    4 eager steps kept."""
    if "small blocks" in case:
        monkeypatch.setattr(fused_module, "LOCAL_KEY_BLOCK", 4)
        monkeypatch.setattr(fused_module, "LOCAL_CAPACITY", 2)
    monkeypatch.setattr(fused_module, "LOCAL_DYNAMIC_LOOP", "each length" in case or DEVICE == "cuda")
    generator = torch.Generator().manual_seed(9)
    sentences, beam, time, source, tokens, src, x, encoder_out = local_case(generator)
    padding = src.eq(PAD)
    orders = [torch.randint(beam, (sentences * beam,), generator=generator) for _ in range(time)]
    outputs, growths = {}, set()
    for path in ("eager", "fused"):
        causal, cross = (module.to(DEVICE) for module in local_modules())
        first_path = "eager" if case.startswith("eager") else path
        set_decoding_path(causal, first_path), set_decoding_path(cross, first_path)
        cross.set_beam_size(beam)
        rows = torch.arange(sentences * beam)  # which original row each row of the batch continues
        state, steps, used_rows = {}, [], False
        with torch.no_grad():
            for t in range(time):
                if t == 4:
                    set_decoding_path(causal, path), set_decoding_path(cross, path)
                expand = rows // beam
                starts = sentence_starts(tokens[rows, max(0, t - 1):t + 1], SEP)[:, -1:]
                causal.hand_in(sentence_starts=on_device(starts))
                # by position in the batch, not by the row continued: beams that continue one row still differ
                query = x[t:t + 1, :rows.numel()].to(DEVICE)
                causal_padding = None
                if t in (10, 11):  # the second row pads (its query sees its sentence and its own key)
                    causal_padding = torch.arange(rows.numel()).eq(1).unsqueeze(1).to(DEVICE)
                out, _ = causal(query, query, query, key_padding_mask=causal_padding, incremental_state=state)
                cross.hand_in(target_sentence_starts=on_device(tokens[rows, t:t + 1].eq(SEP)),
                              source_sentence_ids=on_device(sentence_ids(src[expand], SEP)) if t == 0 else None)
                read, _ = cross(query, encoder_out[:, expand].to(DEVICE), key_padding_mask=padding[expand].to(DEVICE),
                                incremental_state=state)
                steps.append((out[0].cpu(), read[0].cpu()))
                causal_buffer, cross_buffer = causal._get_input_buffer(state), cross._get_input_buffer(state)
                on_fused = path == "fused" and (t >= 4 or first_path == "fused")
                assert (causal_buffer.get("fused_local_keys") is not None) == on_fused
                assert (cross_buffer.get("fused_sentence") is not None) == on_fused
                if on_fused:
                    growths.add(causal_buffer["fused_local_keys"].size(2))
                used_rows |= cross_buffer.get("rows") is not None
                # each beam continues a beam of its sentence chosen at random; after step 5 the first
                # sentence leaves the batch, after step 9 the last; after step 3 (before the eager steps hand
                # over, in the case that hands over) the beams swap as well
                groups = rows.numel() // beam
                order = torch.arange(groups).repeat_interleave(beam) * beam + orders[t][:rows.numel()]
                if t in (5, 9):
                    order = order.view(groups, beam)[1:] if t == 5 else order.view(groups, beam)[:-1]
                    order = order.reshape(-1)
                reorders = [order] + ([torch.arange(order.numel()).view(-1, beam).flip(-1).reshape(-1)]
                                      if t == 3 else [])
                kept = {name: buffer[name].data_ptr() for buffer, name in
                        ((causal_buffer, "fused_local_keys"), (cross_buffer, "fused_sentence"))
                        if buffer.get(name) is not None}
                for reorder in reorders:
                    causal.reorder_incremental_state(state, reorder.to(DEVICE))
                    cross.reorder_incremental_state(state, reorder.to(DEVICE))
                    rows = rows[reorder]
                for buffer, name in ((causal_buffer, "fused_local_keys"), (cross_buffer, "fused_sentence")):
                    if name in kept:  # recorded, gathered by the next step's kernel: not copied
                        assert buffer[name].data_ptr() == kept[name]
                causal.hand_in(), cross.hand_in()
        outputs[path] = steps
    assert rows.numel() == 3 * beam and used_rows
    assert cross_buffer["fused_sentence"].max() >= 4  # past the last sentence of every source (at most 4)
    if "small blocks" in case:
        assert len(growths) >= 2  # 2 positions at first, then widened
    # the bounds: the projections of every row and step (those read are among them)
    causal, cross = causal.cpu(), cross.cpu()
    q, k, v = causal._split_qkv(x)
    causal_magnitude = local_softmax_magnitude(q[:, :LOCAL], k[:, :LOCAL], v[:, :LOCAL])
    cross_q = cross.q_proj(x).view(time, -1, LOCAL_HEADS, cross.head_dim)[:, :, :LOCAL]
    cross_k, cross_v = (part[:, :LOCAL] for part in cross._source_heads(encoder_out))
    cross_magnitude = local_softmax_magnitude(cross_q, cross_k, cross_v)
    block = fused_module.LOCAL_KEY_BLOCK
    width = LOCAL * causal.head_dim  # the local heads' channels (out_proj is the identity)
    for t, ((eager_causal, eager_cross), (fused_causal, fused_cross)) in enumerate(zip(outputs["eager"],
                                                                                      outputs["fused"])):
        # the causal local heads read the current sentence (at most t + 1 keys), the cross ones the
        # aligned sentence (at most the source's 15)
        assert_fp32_close(fused_causal[:, :width], eager_causal[:, :width],
                          local_softmax_terms(causal.head_dim, t + 1, block), causal_magnitude,
                          name=f"{case}: causal local heads, step {t}")
        assert_fp32_close(fused_cross[:, :width], eager_cross[:, :width],
                          local_softmax_terms(cross.head_dim, source, block), cross_magnitude,
                          name=f"{case}: cross local heads, step {t}")
        for module, fused, eager, name in ((causal, fused_causal, eager_causal, "causal"),
                                           (cross, fused_cross, eager_cross, "cross")):
            assert_fp32_close(fused[:, width:], eager[:, width:], module_terms(module, time),
                              name=f"{case}: {name} RFA heads, step {t}")


def test_fused_beam_search_of_a_trained_checkpoint_finds_the_eager_hypotheses():
    """tests/fixtures/rfa_fixed_tau (a tiny RFA-sgate model, 2 updates): fairseq's beam search on the
    fused path finds the eager path's hypotheses, with scores within fp32 rounding. A hypothesis
    may differ only where rounding flips a near tie (scores within that rounding): counted, at
    most one in eight."""
    directory = os.path.join(FIXTURES, "rfa_fixed_tau")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(directory, "checkpoint.pt")], arg_overrides={"data": directory})
    model = models[0].eval().to(DEVICE)
    source = torch.load(os.path.join(directory, "expected.pt"))["src_tokens"].to(DEVICE)
    dictionary = task.target_dictionary
    results = {}
    for path in ("eager", "fused"):
        set_decoding_path(model, path)
        generator = SequenceGenerator([model], dictionary, beam_size=4, max_len=10, min_len=3,
                                      search_strategy=search.BeamSearch(dictionary))
        results[path] = generator.generate([model], {"net_input": {"src_tokens": source,
                                                                   "src_lengths": source.ne(PAD).sum(1)}})
    args = cfg.model  # 16 wide, FFN 16, 1 + 1 layers, 2 x 4 projections (8 features)
    # a score sums up to 10 log-probabilities, each through the model (as test_rfa's beam search test)
    terms = transformer_terms(args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.encoder_layers,
                              args.decoder_layers, source.size(1), 10, 8 + FEATURE_ROUNDINGS, len(dictionary)) + 10
    hypotheses = flips = 0
    for eager_sentence, fused_sentence in zip(results["eager"], results["fused"]):
        for eager, fused in zip(eager_sentence, fused_sentence):
            hypotheses += 1
            magnitude = eager["positional_scores"].abs().max().item()
            bound = fp32_tolerance(terms, magnitude)
            if not torch.equal(eager["tokens"], fused["tokens"]):
                flips += 1
            assert abs(float(eager["score"] - fused["score"])) <= bound
    print(f"[fused beam search] {flips} of {hypotheses} hypotheses differ")
    assert hypotheses == 8 and flips <= hypotheses // 8


# the remedy (configs/demo/rfa_cross_local_L4.sh: 2 of 4 cross heads local), and with 2 causal local heads too;
# sized so that the interpreter decodes it in seconds: 32 wide, heads of 8, 1 + 1 layers, 4 + 8 projections
LOCAL_MODELS = {"cross local heads": ("--rfa-cross-local-heads", "2"),
                "cross and causal local heads": ("--rfa-cross-local-heads", "2", "--rfa-causal-local-heads", "2")}
# whose local heads' kernels loop to each row's own length in Triton's interpreter as well (as compiled for a GPU)
LOOPS_TO_EACH_LENGTH = "cross and causal local heads"
SMALL_MODEL = ("--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
               "--decoder-ffn-embed-dim", "64", "--encoder-layers", "1", "--decoder-layers", "1",
               "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--rfa-causal-proj-dim", "4",
               "--rfa-cross-proj-dim", "8", "--dropout", "0")
SEPARATOR = "<sep>"


def synthetic_windows(split, documents):
    """Windows of 2 consecutive sentences of the embedded synthetic corpus (rfa_doc_mt/data/synthetic.py),
    (source, target) text with the separator between the sentences."""
    windows = []
    for document in generate_documents(1, split, documents):
        targets = [translation.target for translation in translate_document(document)]
        windows += [(f" {SEPARATOR} ".join(document[i:i + 2]), f" {SEPARATOR} ".join(targets[i:i + 2]))
                    for i in range(len(document) - 1)]
    return windows


@pytest.fixture(scope="module", params=list(LOCAL_MODELS))
def trained_local_model(request):
    """A tiny RFA model with local heads (:data:`LOCAL_MODELS`) trained 120 updates (Adam, 32 windows
    each, about 3 s) on the 97 windows of 12 synthetic documents, until its beams are not near ties
    (the training loss falls from 6 to about 0.3); returns it (eval mode), its dictionary, two test
    windows (left-padded, as fairseq batches sources) and its name."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    train, test = synthetic_windows("train", 12), synthetic_windows("test", 1)[:2]
    dictionary = Dictionary()
    for source, target in train + test:
        for word in f"{source} {target}".split():
            dictionary.add_symbol(word)

    def batch(texts, left):
        rows = [torch.tensor([dictionary.index(word) for word in text.split()] + [dictionary.eos()]) for text in texts]
        tokens = torch.full((len(rows), max(len(row) for row in rows)), dictionary.pad())
        for number, row in enumerate(rows):
            if left:
                tokens[number, tokens.size(1) - len(row):] = row
            else:
                tokens[number, :len(row)] = row
        return tokens

    model = build_model("rfa_doc_transformer_tiny", dictionary_task(dictionary, dictionary.index(SEPARATOR)),
                        *SMALL_MODEL, *LOCAL_MODELS[request.param], share_all_embeddings=True).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    try:
        for _ in range(120):
            chosen = torch.randperm(len(train), generator=generator)[:32].tolist()
            source, target = batch([train[i][0] for i in chosen], True), batch([train[i][1] for i in chosen], False)
            # fairseq's decoder input: the target shifted right behind EOS
            previous = torch.cat([torch.full((len(chosen), 1), dictionary.eos()), target[:, :-1]], 1)
            previous[previous.eq(dictionary.eos()) & (torch.arange(previous.size(1)) > 0)] = dictionary.pad()
            logits, _ = model(source, source.ne(PAD).sum(1), previous)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1),
                                                     ignore_index=dictionary.pad())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 1.0, f"the tiny model did not learn ({loss.item():.2f})"
    return model.eval(), dictionary, batch([source for source, _ in test], True), request.param


def test_fused_beam_search_with_local_heads_finds_the_eager_hypotheses(trained_local_model, monkeypatch):
    """A trained tiny model with local heads (:func:`trained_local_model`): fairseq's beam search on
    the fused path, every attention's local heads in their kernels (with both causal and cross local
    heads, looping to each row's own length), finds the eager path's hypotheses through sentence
    boundaries (the aligned source sentence moves), with scores within fp32 rounding; a hypothesis
    may differ only where rounding flips a near tie, at most one in eight."""
    model, dictionary, source, name = trained_local_model
    monkeypatch.setattr(fused_module, "LOCAL_DYNAMIC_LOOP", name == LOOPS_TO_EACH_LENGTH or DEVICE == "cuda")
    model, source = model.to(DEVICE), source.to(DEVICE)
    separator, max_len = dictionary.index(SEPARATOR), 12
    results = {}
    for path in ("eager", "fused"):
        set_decoding_path(model, path)
        generator = SequenceGenerator([model], dictionary, beam_size=4, max_len=max_len, min_len=3,
                                      search_strategy=search.BeamSearch(dictionary))
        results[path] = generator.generate([model], {"net_input": {"src_tokens": source,
                                                                   "src_lengths": source.ne(PAD).sum(1)}})
    layer = model.decoder.layers[0]
    assert layer.encoder_attn.local_heads == 2 and uses_fused_decoding(layer.encoder_attn, source.float())
    args = model.args
    # a score sums up to 12 log-probabilities, each through the model (the test above), an attention's
    # sums being the RFA heads' or the local heads' (over at most the whole source or target)
    rfa = max(layer.encoder_attn.features, layer.self_attn.features) + FEATURE_ROUNDINGS
    local = local_softmax_terms(layer.encoder_attn.head_dim, max(source.size(1), max_len), fused_module.LOCAL_KEY_BLOCK)
    terms = transformer_terms(args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.encoder_layers,
                              args.decoder_layers, source.size(1), max_len, max(rfa, local), len(dictionary)) + max_len
    hypotheses = flips = crossings = 0
    for eager_sentence, fused_sentence in zip(results["eager"], results["fused"]):
        for eager, fused in zip(eager_sentence, fused_sentence):
            hypotheses += 1
            crossings += int(eager["tokens"][:-1].eq(separator).any())
            if not torch.equal(eager["tokens"], fused["tokens"]):
                flips += 1
            bound = fp32_tolerance(terms, eager["positional_scores"].abs().max().item())
            assert abs(float(eager["score"] - fused["score"])) <= bound
    print(f"[fused beam search, local heads] {flips} of {hypotheses} hypotheses differ; {crossings} go past a "
          f"sentence boundary")
    assert hypotheses == 8 and flips <= hypotheses // 8 and crossings >= 2


def test_the_kernels_compile_for_an_h100(tmp_path):
    """Triton's compiler builds every branch of the kernels for compute capability 9.0 (H100), down
    to its binary, with no GPU: what the interpreter cannot check (types, layouts, tl.dot's shapes).
    In a process without the interpreter (it changes how Triton defines its language)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rfa_doc_mt", "modules",
                        "random_feature_attention", "triton_kernels.py")
    code = ("import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('triton_kernels', {path!r})\n"
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
            "print(json.dumps(module.compile_kernels(90)))\n")
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    environment["TRITON_CACHE_DIR"] = str(tmp_path)  # compiled here, not read from a cache
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(sizes) == 14 and all(size > 0 for size in sizes.values()), sizes
