"""Random matrices and feature maps of RFA (Wu et al. 2022, §3.1), and the release's key norm-rescale.

Feature maps (inputs are L2-normalised, as in Peng et al.; ``τ`` a per-head temperature)::

    fourier:   φ(x) = [sin(W x̂/τ), cos(W x̂/τ)] / √D        φ(x)·φ(y) ≈ exp((x̂·ŷ - 1)/τ²)
    positive:  φ(x) = exp(W x̂/τ - 1/τ²) / √D               φ(x)·φ(y) ≈ exp((x̂·ŷ - 1)/τ²)

with the D rows of W drawn N(0, I) (orthogonal random features). Both estimate the same
kernel, which lies in [exp(-2/τ²), 1], so attention approximates ``softmax(q̂·k̂ / τ²)``.
"""

import math
import random
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

# Random matrices per attention module that training draws from (one per forward).
RANDOM_MATRIX_BANK_SIZE = 16
# τ is clamped here so that a learned temperature can never divide by ~0.
MIN_TAU = 0.05
FEATURE_MAPS = ("fourier", "positive")
# Norms below this are floored before inputs are made unit vectors (a zero input stays zero).
UNIT_NORM_FLOOR = 1e-6


def orthogonal_random_matrices(generator: torch.Generator, count: int, num_heads: int, num_projections: int,
                               head_dim: int) -> Tensor:
    """[count, heads, num_projections, head_dim] fp32: rows marginally N(0, I), orthogonal in
    blocks of ``head_dim`` (orthogonal random features lower the kernel estimate's variance).

    Drawn in fp64 on CPU from ``generator`` only, so a seed always gives the same matrices.
    """
    blocks = -(-num_projections // head_dim)
    shape = (count * num_heads * blocks, head_dim, head_dim)
    gaussian = torch.randn(shape, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    # sign fix: makes q Haar-distributed (QR alone is biased by its sign convention)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
    # row lengths of Gaussian vectors (chi with head_dim degrees of freedom)
    lengths = torch.randn(shape, generator=generator, dtype=torch.float64).norm(dim=-1)
    rows = q.transpose(-1, -2) * lengths.unsqueeze(-1)
    rows = rows.reshape(count, num_heads, blocks * head_dim, head_dim)[:, :, :num_projections]
    return rows.float().contiguous()


class RandomMatrices(nn.Module):
    """The random projections of one attention module: a seeded bank, a fixed eval matrix.

    * training: every forward draws a new matrix from a bank of
      :data:`RANDOM_MATRIX_BANK_SIZE` seeded matrices; the draw depends only on the module's
      seed, the update number and the number of draws since fairseq's ``set_num_updates``
      (called before every micro-batch), never on global RNG. So every micro-batch of an update,
      on every distributed worker and with any ``--update-freq``, draws the same matrices: an
      update's batch sees one sample of the random features however it is split, and a resumed
      run draws what an uninterrupted one does;
    * evaluation: always the same matrix (``eval_matrix``), so the training form, the
      incremental form and beam search see identical features.

    ``seed`` and ``eval_matrix`` are persistent buffers: a checkpoint restores them exactly,
    and loading a checkpoint whose seed differs rebuilds the bank from that seed. The bank
    itself is derived from the seed and not saved (it would be 16x the module's matrices).

    For analysis, :meth:`evaluate_with` makes evaluation use other matrices of the bank (one, or
    several stacked: more random features, a closer estimate of the same kernel) in place of
    ``eval_matrix``, without touching what a checkpoint saves.
    """

    def __init__(self, num_heads: int, num_projections: int, head_dim: int, seed: int,
                 bank_size: int = RANDOM_MATRIX_BANK_SIZE):
        super().__init__()
        self.num_heads, self.num_projections, self.head_dim = num_heads, num_projections, head_dim
        self.bank_size = bank_size
        bank = self._build_bank(seed)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.long))
        self.register_buffer("eval_matrix", bank[0].clone())
        self.register_buffer("bank", bank, persistent=False)
        self._bank_seed = seed
        self.num_updates = 0
        self.draws_in_update = 0
        self.holding, self.held = False, None  # see begin_forward
        self.evaluation_override: Optional[Tensor] = None  # see evaluate_with

    def _build_bank(self, seed: int) -> Tensor:
        generator = torch.Generator().manual_seed(seed)
        return orthogonal_random_matrices(generator, self.bank_size, self.num_heads, self.num_projections,
                                          self.head_dim)

    def set_num_updates(self, num_updates: int) -> None:
        # fairseq calls this before every micro-batch (FairseqTask.train_step): the draws restart
        self.num_updates = num_updates
        self.draws_in_update = 0
        self.held = None

    def begin_forward(self) -> None:
        """Called by the model at the start of each forward pass: the first draw of the pass is
        held, and every later call in it (activation checkpointing's recomputation in the
        backward pass) returns that matrix, until the next :meth:`begin_forward`."""
        self.holding, self.held = True, None

    def draw_index(self) -> int:
        """Bank index of the next training draw: a hash of (seed, update, draw), no global RNG."""
        rng = random.Random(f"{self._bank_seed}:{self.num_updates}:{self.draws_in_update}")
        return rng.randrange(self.bank_size)

    @property
    def evaluation_matrix(self) -> Tensor:
        """The matrix evaluation and decoding use: ``eval_matrix``, unless :meth:`evaluate_with`
        chose others."""
        return self.eval_matrix if self.evaluation_override is None else self.evaluation_override

    def evaluate_with(self, indices: Optional[Sequence[int]]) -> int:
        """Evaluate with the bank's matrices ``indices`` stacked along the projections (one index:
        that matrix alone; ``eval_matrix`` is the bank's first, index 0), or with ``eval_matrix``
        again (None). Returns the number of projections evaluation now uses."""
        if indices is None:
            self.evaluation_override = None
            return self.num_projections
        indices = list(indices)
        bad = [index for index in indices if not 0 <= index < self.bank_size]
        if not indices or bad:
            raise ValueError(f"bank indices {bad or indices}: expected one or more of 0 to {self.bank_size - 1}")
        self.evaluation_override = torch.cat([self.bank[index] for index in indices], dim=1)
        return self.evaluation_override.size(1)

    def forward(self) -> Tensor:
        """[heads, num_projections, head_dim] (evaluation: the projections :meth:`evaluate_with`
        chose, when it did)"""
        if not self.training:
            return self.evaluation_matrix
        if self.holding and self.held is not None:
            return self.held
        index = self.draw_index()
        self.draws_in_update += 1
        if self.holding:
            self.held = self.bank[index]
        return self.bank[index]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        seed = int(self.seed.item())
        if seed != self._bank_seed:
            self.bank = self._build_bank(seed).to(self.eval_matrix.device)
            self._bank_seed = seed

    def extra_repr(self) -> str:
        return (f"heads={self.num_heads}, projections={self.num_projections}, head_dim={self.head_dim}, "
                f"bank={self.bank_size}, seed={self._bank_seed}")


def module_seed(base_seed: int, layer_index: int, role: str) -> int:
    """Distinct seed per layer and per attention role ("causal", "cross")."""
    return (int(base_seed) * 1_000_003 + layer_index * 101 + {"causal": 1, "cross": 2}[role]) % (2 ** 62)


def l2_normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(UNIT_NORM_FLOOR)


def projection_of(random_matrix: Tensor, tau: Optional[Tensor]) -> Tensor:
    """W / τ: [heads, D, head_dim]. In training, on the devices of :data:`FUSED_FEATURE_DEVICES`,
    through one Triton kernel each way (:func:`.fused_features.fused_inverse_tau`) where they run."""
    if tau is None:
        return random_matrix
    if torch.is_grad_enabled() and (tau.requires_grad or random_matrix.requires_grad):
        if tau.device.type in FUSED_FEATURE_DEVICES and not random_matrix.requires_grad \
                and tau.dtype == random_matrix.dtype == torch.float32:
            from .fused_features import fused_inverse_tau, fused_inverse_tau_work

            if fused_inverse_tau_work(tau.device):
                return fused_inverse_tau(random_matrix, tau)
        return _InverseTauScaled.apply(random_matrix, tau)
    return random_matrix / tau.clamp_min(MIN_TAU).view(-1, 1, 1)


class _InverseTauScaled(torch.autograd.Function):
    """``W / max(τ, MIN_TAU)`` per head, whose backward takes τ's gradient in one product and a
    sum, ``-Σ g · (W/τ) / τ`` (0 where the clamp holds τ at its floor): autograd's division and
    clamp take about a dozen operations, each a kernel on a GPU, where RFA's training step is
    bound by launching them."""

    @staticmethod
    def forward(ctx, random_matrix: Tensor, tau: Tensor) -> Tensor:
        floored = tau.clamp_min(MIN_TAU)
        projection = random_matrix / floored.view(-1, 1, 1)
        ctx.save_for_backward(projection, floored, tau < MIN_TAU)
        return projection

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        projection, floored, below = ctx.saved_tensors
        want_matrix, want_tau = ctx.needs_input_grad
        grad_matrix = grad / floored.view(-1, 1, 1) if want_matrix else None
        grad_tau = None
        if want_tau:
            grad_tau = (grad * projection).sum((1, 2)).div_(floored).neg_().masked_fill_(below, 0.0)
        return grad_matrix, grad_tau


def _project(x: Tensor, projection: Tensor) -> Tensor:
    """x [..., heads, time, head_dim] (heads third from the end) → [..., heads, time, D].

    einsum turns this into one bmm over heads without expanding W over the batch."""
    return torch.einsum("...htd,hkd->...htk", l2_normalise(x.float()), projection.float())


# the device types on which the Fourier features go one head at a time (:class:`_FourierFeatures`:
# a head's angles stay in a CPU's caches); elsewhere, as on a GPU where a loop over heads costs
# launches, every head in one batched product
PER_HEAD_FEATURES = {"cpu"}
# the device types on which the training form's Fourier features of a [lead, heads, time,
# head_dim] input take the fused Triton kernels (:mod:`.fused_features`: three kernels where
# torch's operators take about seventeen), and its floored readout and learned temperature theirs,
# when Triton is installed; the tests add the CPU under Triton's interpreter
FUSED_FEATURE_DEVICES = {"cuda"}


class _FourierFeatures(torch.autograd.Function):
    """``[sin(P), cos(P)] · scale`` with ``P = x̂ Wᵀ`` (per head), whose backward reads its own output.

    d(s·sin P)/dP = s·cos P and d(s·cos P)/dP = -s·sin P are the output's two halves, swapped:
    the backward needs no sine or cosine and nothing but the output, which the attention's
    matrix products keep for their own backward anyway. Autograd's ``sin``/``cos`` would keep P
    too (half the features' size, per query and key of every layer) and evaluate both functions
    again.

    The projection is part of the function, and both directions go one head at a time: a head's
    P (or its gradient) is computed into one small buffer, turned into that head's features (or
    the gradients of its unit vectors and projection) while it is still in cache, and the buffer
    serves the next head. No tensor of P's size is allocated: at the paper's cross-attention size
    (512 features) P is half the features, and every fresh allocation that large is new memory
    the CPU must fault in, twice per step and module."""

    @staticmethod
    def forward(ctx, units: Tensor, projection: Tensor, scale: float) -> Tensor:
        """units [heads, ..., time, head_dim] (heads first, contiguous) → [..., heads, time, 2D]."""
        heads, count, dim = projection.shape
        _, *lead, time, _ = units.shape
        rows = units.view(heads, -1, dim)
        features = units.new_empty(*lead, heads, time, 2 * count)
        halves = features.movedim(-3, 0)  # heads first, as the units
        weight = projection.transpose(1, 2)
        if units.device.type not in PER_HEAD_FEATURES:  # every head at once
            angles = torch.bmm(rows, weight).view(heads, *lead, time, count)
            torch.sin(angles, out=halves[..., :count])
            torch.cos(angles, out=halves[..., count:])
            halves.mul_(scale)
            ctx.save_for_backward(features, rows, projection)
            return features
        angles = units.new_empty(rows.size(1), count)  # one head's P at a time
        for head in range(heads):
            torch.mm(rows[head], weight[head], out=angles)
            head_angles = angles.view(*lead, time, count)
            torch.sin(head_angles, out=halves[head, ..., :count])
            torch.cos(head_angles, out=halves[head, ..., count:])
            halves[head].mul_(scale)
        ctx.save_for_backward(features, rows, projection)
        return features

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        features, rows, projection = ctx.saved_tensors
        heads, count, dim = projection.shape
        grad, features = grad.movedim(-3, 0), features.movedim(-3, 0)  # heads first
        want_units, want_projection = ctx.needs_input_grad[:2]
        grad_units = rows.new_empty(rows.shape) if want_units else None
        grad_projection = projection.new_empty(projection.shape) if want_projection else None
        if rows.device.type not in PER_HEAD_FEATURES:  # every head at once
            angle_grad = rows.new_empty(features.shape[:-1] + (count,))  # heads first and contiguous
            torch.mul(grad[..., :count], features[..., count:], out=angle_grad)
            angle_grad = angle_grad.addcmul_(grad[..., count:], features[..., :count], value=-1)
            angle_grad = angle_grad.view(heads, -1, count)
            if want_units:
                grad_units = torch.bmm(angle_grad, projection).view(features.shape[:-1] + (dim,))
            if want_projection:
                grad_projection = torch.bmm(angle_grad.transpose(1, 2), rows)
            return grad_units, grad_projection, None
        angle_grad = rows.new_empty(rows.size(1), count)  # one head's dP at a time
        head_grad = angle_grad.view(features.shape[1:-1] + (count,))
        for head in range(heads):
            scaled_sin, scaled_cos = features[head, ..., :count], features[head, ..., count:]
            torch.mul(grad[head, ..., :count], scaled_cos, out=head_grad)
            head_grad.addcmul_(grad[head, ..., count:], scaled_sin, value=-1)
            if want_units:
                torch.mm(angle_grad, projection[head], out=grad_units[head])
            if want_projection:
                torch.mm(angle_grad.t(), rows[head], out=grad_projection[head])
        if want_units:
            grad_units = grad_units.view(features.shape[:-1] + (dim,))
        return grad_units, grad_projection, None


def fourier_rows(units: Tensor, projection: Tensor, scale: float) -> Tensor:
    """One head's Fourier features, no gradient: units [..., n, head_dim] (contiguous), its
    projection (W/τ) [D, head_dim] → ``[sin P, cos P] · scale`` [..., n, 2D] with ``P = units Wᵀ``."""
    dim = units.size(-1)
    angles = torch.mm(units.reshape(-1, dim), projection.t())
    count = angles.size(-1)
    features = angles.new_empty(angles.size(0), 2 * count)
    torch.sin(angles, out=features[:, :count])
    torch.cos(angles, out=features[:, count:])
    return features.mul_(scale).view(units.shape[:-1] + (2 * count,))


def fourier_angle_grad(grad: Tensor, features: Tensor) -> Tensor:
    """The gradient of the angles P from that of their features ``[s sin P, s cos P]`` (both
    [..., 2D]), read from the features themselves: ``g_sin · s cos P - g_cos · s sin P``, [rows, D]."""
    count = features.size(-1) // 2
    angles = torch.mul(grad[..., :count], features[..., count:])
    return angles.addcmul_(grad[..., count:], features[..., :count], value=-1).reshape(-1, count)


def random_fourier_features(x: Tensor, random_matrix: Tensor, tau: Optional[Tensor] = None,
                            projection: Optional[Tensor] = None) -> Tensor:
    """[..., heads, time, head_dim] → [..., heads, time, 2D] fp32: [sin(Wx̂/τ), cos(Wx̂/τ)] / √D.

    φ(x)·φ(y) = mean_i cos(w_i·(x̂ - ŷ)/τ) ≈ exp(-|x̂ - ŷ|²/2τ²) = exp((x̂·ŷ - 1)/τ²).
    ``projection``: W/τ (:func:`projection_of`) where the caller made it already, for both the
    queries and the keys of one forward.
    """
    projection = (projection_of(random_matrix, tau) if projection is None else projection).float()
    if x.dim() == 4 and x.device.type in FUSED_FEATURE_DEVICES:
        from .fused_features import fused_features_work, fused_fourier_features

        if fused_features_work(x.device):
            return fused_fourier_features(x, projection)
    units = unit_vectors(x.movedim(-3, 0))  # heads first: the layout of the projection's product
    return _FourierFeatures.apply(units, projection, 1.0 / math.sqrt(projection.size(-2)))


def positive_random_features(x: Tensor, random_matrix: Tensor, tau: Optional[Tensor] = None,
                             projection: Optional[Tensor] = None) -> Tensor:
    """[..., heads, time, head_dim] → [..., heads, time, D] fp32: exp(Wx̂/τ - 1/τ²) / √D.

    Positive random features (Choromanski et al., 2021) of the same kernel as the Fourier map:
    E[φ(x)·φ(y)] = exp(x̂·ŷ/τ²) exp(-1/τ²). The exponent is at most |w|/τ - 1/τ² ≤ |w|²/4,
    bounded for every τ, so no max-subtraction is needed for fp32.
    """
    projected = _project(x, projection_of(random_matrix, tau) if projection is None else projection)
    if tau is None:
        offset = 1.0
    else:
        offset = tau.clamp_min(MIN_TAU).float().pow(-2).view(-1, 1, 1)
    scale = 1.0 / math.sqrt(random_matrix.size(-2))
    return torch.exp(projected - offset) * scale


class DecodingFeatureMap:
    """The feature map in the form decoding evaluates once per token, from unit vectors laid out
    head-major (``[heads, rows, head_dim]``), so that ``x̂ W/τ`` is one batched product over heads:

    * fourier: ``[sin P, cos P] / √D`` with ``P = x̂ (W/τ)ᵀ``, written straight into the halves
      of the output;
    * positive: ``exp(P + c)`` with ``c = -1/τ² - ln √D`` (the scale inside the exponent),
      one ``baddbmm`` and one ``exp``.

    The training form (:func:`random_fourier_features`, :func:`positive_random_features`) takes
    any layout and keeps its memory-saving backward; this one is its few-operations form for a
    decoding step, differentiable in its input but not in τ (decoding is inference). ``weight``
    (``(W/τ)ᵀ``, [heads, head_dim, D]) and ``offset`` (c; zeros for fourier) are derived once per
    batch (:meth:`build`).
    """

    def __init__(self, name: str, weight: Tensor, offset: Tensor):
        if name not in FEATURE_MAPS:
            raise ValueError(f"unknown feature map {name!r}; expected one of {FEATURE_MAPS}")
        self.sine = name == "fourier"
        self.weight, self.offset = weight, offset

    @classmethod
    def build(cls, name: str, random_matrix: Tensor, tau: Optional[Tensor]) -> "DecodingFeatureMap":
        """weight and offset from the random matrix [heads, D, head_dim] and τ [heads] (or None)."""
        projection = projection_of(random_matrix, tau).detach().float()  # [heads, D, head_dim]
        heads, count, _ = projection.shape
        offset = projection.new_zeros(heads, 1, 1)
        if name == "positive":
            inverse_square = 1.0 if tau is None else tau.detach().float().clamp_min(MIN_TAU).pow(-2).view(-1, 1, 1)
            offset = offset - inverse_square - 0.5 * math.log(count)
        return cls(name, projection.transpose(1, 2).contiguous(), offset)

    def __call__(self, units: Tensor) -> Tensor:
        """units [heads, rows, head_dim] (unit vectors, fp32) → features [heads, rows, F] fp32."""
        in_place = not (torch.is_grad_enabled() and (units.requires_grad or self.weight.requires_grad))
        if not self.sine:
            projected = torch.baddbmm(self.offset, units, self.weight)
            return projected.exp_() if in_place else projected.exp()
        projected = torch.bmm(units, self.weight)
        scale = 1.0 / math.sqrt(projected.size(-1))
        if not in_place:
            return torch.cat([torch.sin(projected), torch.cos(projected)], dim=-1) * scale
        half = projected.size(-1)
        features = projected.new_empty(projected.shape[:-1] + (2 * half,))
        torch.sin(projected, out=features[..., :half])
        torch.cos(projected, out=features[..., half:])
        return features.mul_(scale)


class _UnitVectors(torch.autograd.Function):
    """``x / |x|`` (norms floored at 1e-6) written contiguous in x's dimension order, whose
    backward is ``(g - u (u·g)) / |x|`` in three passes (autograd's division and norm take about
    eight over tensors of x's size); below the floor the norm is a constant and the gradient ``g / 1e-6``."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        floored = norms < UNIT_NORM_FLOOR
        norms = norms.clamp_min(UNIT_NORM_FLOOR)
        units = torch.div(x, norms, out=x.new_empty(x.shape))
        ctx.save_for_backward(units, norms, floored)
        return units

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        units, norms, floored = ctx.saved_tensors
        along = (units * grad).sum(-1, keepdim=True).masked_fill_(floored, 0.0)
        return torch.addcmul(grad, units, along, value=-1).div_(norms)


def unit_vectors(x: Tensor) -> Tensor:
    """``x / |x|`` over the last dimension (as :func:`l2_normalise`), fp32, contiguous in x's
    dimension order: pass x permuted to the layout wanted (e.g. heads first), and the division
    writes it, with no copy before or after. Differentiable (:class:`_UnitVectors`)."""
    x = x.float()
    if torch.is_grad_enabled() and x.requires_grad:
        return _UnitVectors.apply(x)
    norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(UNIT_NORM_FLOOR)
    return torch.div(x, norms, out=x.new_empty(x.shape))


def feature_map_function(name: str):
    return {"fourier": random_fourier_features, "positive": positive_random_features}[name]


def feature_size(name: str, num_projections: int) -> int:
    return 2 * num_projections if name == "fourier" else num_projections


def norm_rescale_weights(k: Tensor, tau: Optional[Tensor], padding_mask: Optional[Tensor] = None) -> Tensor:
    """[batch, heads, source] key weights of the release's ``--norm-rescale`` (cross attention).

    The feature map sees only the direction k̂, so it estimates exp((q̂·k̂ - 1)/τ²) and loses
    the key's length, which softmax attention, exp(q·k/√d), uses: a longer key draws more
    attention. The release multiplies each key's features by ``exp(½ (|k|·d^-½ / τ)²)`` to put
    it back (the factor by which exp(-|x - y|²/2) falls short of exp(x·y) for x = k/(d^¼ τ)).

    To keep the factor finite in fp32 the largest exponent over the example's *real* source
    keys (per head) is subtracted: a factor common to every key of a row cancels in
    φ(q)·S / φ(q)·z, so neither the padding, nor the other rows of the batch, nor the beam
    change an example's output (the release took the maximum over padding too). The maximum
    is a constant for the gradient, as in the release.

    Args:
        k: [batch, heads, source, head_dim] keys before the feature map
        tau: [heads] temperatures, or None (τ = 1)
        padding_mask: [batch, source] bool, True at padding (weight 0 there)
    """
    head_dim = k.size(-1)
    scale = k.float().norm(dim=-1) / math.sqrt(head_dim)  # [batch, heads, source]
    if tau is not None:
        scale = scale / tau.float().clamp_min(MIN_TAU).view(-1, 1)
    exponent = 0.5 * scale.pow(2)
    if padding_mask is not None:
        exponent = exponent.masked_fill(padding_mask.bool().unsqueeze(1), float("-inf"))
    largest = exponent.max(dim=-1, keepdim=True).values.detach()
    return torch.exp(exponent - largest)

