"""RFA's Fourier features in training, fused: one Triton kernel forward, one and a batched product
backward (:func:`.triton_kernels.fourier_features_kernel` and its backward); and its floored
readout, one kernel each way (:func:`.triton_kernels.normalise_kernel` and its backward).

On a GPU at the paper's batches a training step is bound by launching kernels (docs/benchmarks.md:
about 24 µs of host time per kernel, for the transformer and RFA alike). The training form's
features of a query or key take about seventeen kernels in torch's operators: the unit vectors
(norm, floor, division), the projection, sine, cosine and scale forward; the angles' gradient, its
two products and the unit vectors' backward. Twelve attentions make features twice each per
step. Fused, they take three, and compute the same function: the unit vectors with the norms
floored at :data:`.features.UNIT_NORM_FLOOR`, fp32 products, the backward of
:class:`.features._FourierFeatures` and :class:`.features._UnitVectors`.

The floored readout ``numerator / max(mass, floor)`` of every training form (:func:`.state.normalised`)
takes three operators forward and seven backward in torch (:class:`.state._Normalised`), twelve
times a step; fused, one each way. So does a learned temperature's projection ``W / max(τ, floor)``
(:func:`.features.projection_of`, :class:`.features._InverseTauScaled`: three and five), once
per attention and step.

Which path runs: :func:`.features.random_fourier_features` takes the fused features for inputs of
one leading dimension, :func:`.state.normalised` the fused readout for fp32 inputs of three or
more dimensions that need a gradient, and :func:`.features.projection_of` the fused projection
for an fp32 τ that needs a gradient and a random matrix that does not, on the device types of
:data:`.features.FUSED_FEATURE_DEVICES` (CUDA; the tests add the CPU under Triton's interpreter)
when Triton is installed. The first use of each in a process checks its kernels on a small input;
if they fail (a Triton that cannot compile them), the torch form is taken from then on, with a
warning.
"""

import logging
import math

import torch
from torch import Tensor

from .features import MIN_TAU, UNIT_NORM_FLOOR
from .fused import _block, _kernels, _launch, triton_available
from .state import NORMALISER_FLOOR

logger = logging.getLogger(__name__)
# rows of one program: two tiles of 32 x 64 fp32 (the rows' unit vectors and the angles) in registers
ROWS_BLOCK = 32
# projections of one block of a program's loop
PROJECTIONS_BLOCK = 64
# rows of one program of the normalisation's kernels (tiles of 32 x the head's values)
NORMALISE_ROWS_BLOCK = 32
# entries of a head's W of one program of the temperature's forward kernel, and of each step of its
# backward's loop (one program a head)
INVERSE_TAU_BLOCK = 1024
# whether the kernels passed their check in this process, per device type: the features', the
# readout's, the temperature's
_CHECKED = {}
_CHECKED_NORMALISE = {}
_CHECKED_INVERSE_TAU = {}


class _FusedFourierFeatures(torch.autograd.Function):
    """x [lead, heads, time, head_dim] and W/τ [heads, D, head_dim] → ``[sin P, cos P] · scale``
    [lead, heads, time, 2D] fp32, ``P = x̂ (W/τ)ᵀ`` (:func:`.features.random_fourier_features`)."""

    @staticmethod
    def forward(ctx, x: Tensor, projection: Tensor, scale: float) -> Tensor:
        lead, heads, time, head_dim = x.shape
        projections = projection.size(1)
        if x.stride(-1) != 1:
            x = x.contiguous()
        projection = projection.float().contiguous()
        count = lead * time
        features = x.new_empty(lead, heads, time, 2 * projections, dtype=torch.float32)
        units = x.new_empty(heads, count, head_dim, dtype=torch.float32)
        norms = x.new_empty(heads, count, dtype=torch.float32)
        _launch(_kernels(x.device).fourier_features_kernel, (_cdiv(count, ROWS_BLOCK), heads),
                x, projection, features, units, norms, count, time, head_dim,
                x.stride(0), x.stride(1), x.stride(2), projection.stride(0), projection.stride(1),
                features.stride(0), features.stride(1), features.stride(2), scale, UNIT_NORM_FLOOR,
                PROJECTIONS=projections, BLOCK_ROWS=ROWS_BLOCK, BLOCK_DIM=_block(head_dim),
                BLOCK_PROJECTIONS=_block(projections, largest=PROJECTIONS_BLOCK))
        ctx.save_for_backward(features, projection, units, norms)
        ctx.x_dtype = x.dtype
        return features

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        features, projection, units, norms = ctx.saved_tensors
        lead, heads, time, _ = features.shape
        _, count, head_dim = units.shape
        projections = projection.size(1)
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        angle_grad = units.new_empty(heads, count, projections)
        grad_x = units.new_empty(heads, count, head_dim)
        _launch(_kernels(grad.device).fourier_features_backward_kernel, (_cdiv(count, ROWS_BLOCK), heads),
                grad, features, projection, units, norms, angle_grad, grad_x, count, time, head_dim,
                grad.stride(0), grad.stride(1), grad.stride(2), features.stride(0), features.stride(1),
                features.stride(2), projection.stride(0), projection.stride(1), UNIT_NORM_FLOOR,
                PROJECTIONS=projections, BLOCK_ROWS=ROWS_BLOCK, BLOCK_DIM=_block(head_dim),
                BLOCK_PROJECTIONS=_block(projections, largest=PROJECTIONS_BLOCK))
        want_x, want_projection = ctx.needs_input_grad[:2]
        grad_x = grad_x.view(heads, lead, time, head_dim).transpose(0, 1).to(ctx.x_dtype) if want_x else None
        grad_projection = torch.bmm(angle_grad.transpose(1, 2), units) if want_projection else None
        return grad_x, grad_projection, None


def _cdiv(n: int, d: int) -> int:
    return -(-n // d)


def fused_fourier_features(x: Tensor, projection: Tensor) -> Tensor:
    """:func:`.features.random_fourier_features` of x [lead, heads, time, head_dim] with its W/τ,
    through the fused kernels."""
    return _FusedFourierFeatures.apply(x, projection, 1.0 / math.sqrt(projection.size(1)))


def fused_features_work(device: torch.device) -> bool:
    """Whether the fused kernels run on ``device``'s type: Triton is installed and, on first asking
    in this process, both kernels give the torch form's features and gradients on a small input
    (else a warning, and False from then on)."""
    return _works(device, _CHECKED, _check)


def _works(device: torch.device, checked: dict, check) -> bool:
    """Triton installed, and ``check(device)`` passed (asked once per device type: ``checked``)."""
    if not triton_available():
        return False
    if device.type not in checked:
        checked[device.type] = check(device)
    return checked[device.type]


def _check(device: torch.device) -> bool:
    from .features import _FourierFeatures, unit_vectors

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 3, 16, generator=generator).to(device).requires_grad_()
    projection = torch.randn(2, 16, 16, generator=generator).to(device).requires_grad_()
    try:
        fused = fused_fourier_features(x, projection)
        grads = torch.autograd.grad(fused.square().sum(), (x, projection))
        units = unit_vectors(x.movedim(-3, 0))
        plain = _FourierFeatures.apply(units, projection, 0.25)
        expected = torch.autograd.grad(plain.square().sum(), (x, projection))
    except Exception as error:  # a Triton that cannot compile or run them
        logger.warning("RFA's fused training features do not run here (%s: %s); the torch form is taken",
                       type(error).__name__, str(error)[:200])
        return False
    # 16 fp32 products per angle of size at most 4 or so: far within 1e-3
    agree = torch.allclose(fused, plain, atol=1e-4) and all(
        torch.allclose(got, want, rtol=1e-3, atol=1e-3) for got, want in zip(grads, expected))
    if not agree:
        logger.warning("RFA's fused training features differ from the torch form here; the torch form is taken")
    return agree


class _FusedNormalised(torch.autograd.Function):
    """:class:`.state._Normalised` in one kernel each way: x [..., time, dv + 1] fp32 (the last
    column the mass; last dimension contiguous) → [..., time, dv]."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        columns = x.size(-1) - 1
        flat = _lead_time(x)
        out = x.new_empty(x.shape[:-1] + (columns,))
        flat_out = out.view(-1, x.size(-2), columns)
        _launch(_kernels(x.device).normalise_kernel, _normalise_grid(flat),
                flat, flat_out, flat.size(1), columns, flat.stride(0), flat.stride(1), flat_out.stride(0),
                flat_out.stride(1), NORMALISER_FLOOR, BLOCK_ROWS=NORMALISE_ROWS_BLOCK, BLOCK_COLUMNS=_block(columns))
        ctx.save_for_backward(flat)
        ctx.shape = x.shape
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> Tensor:
        (flat,) = ctx.saved_tensors
        columns = flat.size(-1) - 1
        flat_grad = _lead_time(grad)
        flat_grad_x = flat.new_empty(flat.shape)
        _launch(_kernels(flat.device).normalise_backward_kernel, _normalise_grid(flat),
                flat_grad, flat, flat_grad_x, flat.size(1), columns, flat_grad.stride(0), flat_grad.stride(1),
                flat.stride(0), flat.stride(1), flat_grad_x.stride(0), flat_grad_x.stride(1), NORMALISER_FLOOR,
                BLOCK_ROWS=NORMALISE_ROWS_BLOCK, BLOCK_COLUMNS=_block(columns))
        return flat_grad_x.view(ctx.shape)


def _lead_time(x: Tensor) -> Tensor:
    """x [..., time, columns] as [lead, time, columns] with its last dimension contiguous (a view
    where the leading dimensions merge, as they do for the training forms' heads and batch)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.reshape(-1, x.size(-2), x.size(-1))


def _normalise_grid(flat: Tensor):
    return _cdiv(flat.size(1), NORMALISE_ROWS_BLOCK), flat.size(0)


def fused_normalised(x: Tensor) -> Tensor:
    """:func:`.state.normalised` of x [..., time, dv + 1] fp32 through the fused kernels."""
    return _FusedNormalised.apply(x)


def fused_normalise_work(device: torch.device) -> bool:
    """As :func:`fused_features_work`, for the floored readout's kernels."""
    return _works(device, _CHECKED_NORMALISE, _check_normalise)


def _check_normalise(device: torch.device) -> bool:
    from .state import _Normalised

    generator = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 5, 17, generator=generator)
    x[0, 1, 2, -1] = NORMALISER_FLOOR / 2  # one mass below the floor
    x = x.to(device).requires_grad_()
    weights = torch.randn(2, 3, 5, 16, generator=generator).to(device)
    try:
        fused = fused_normalised(x)
        (grad,) = torch.autograd.grad((fused * weights).sum(), x)
        plain = _Normalised.apply(x)
        (expected,) = torch.autograd.grad((plain * weights).sum(), x)
    except Exception as error:  # a Triton that cannot compile or run them
        logger.warning("RFA's fused training readout does not run here (%s: %s); the torch form is taken",
                       type(error).__name__, str(error)[:200])
        return False
    # a quotient and a sum of 16 products of size at most 10 x 4 each: far within 1e-4 and 1e-3
    agree = torch.allclose(fused, plain, atol=1e-4) and torch.allclose(grad, expected, rtol=1e-3, atol=1e-3)
    if not agree:
        logger.warning("RFA's fused training readout differs from the torch form here; the torch form is taken")
    return agree


class _FusedInverseTau(torch.autograd.Function):
    """:class:`.features._InverseTauScaled` in one kernel each way, for a random matrix that needs
    no gradient: W [heads, D, head_dim] fp32, τ [heads] fp32 → W / max(τ, MIN_TAU)."""

    @staticmethod
    def forward(ctx, random_matrix: Tensor, tau: Tensor) -> Tensor:
        heads = random_matrix.size(0)
        matrix = random_matrix.contiguous()
        size = matrix[0].numel()
        projection = torch.empty_like(matrix)
        _launch(_kernels(matrix.device).inverse_tau_kernel, (_cdiv(size, INVERSE_TAU_BLOCK), heads),
                matrix, tau, projection, MIN_TAU, SIZE=size, BLOCK=INVERSE_TAU_BLOCK)
        ctx.save_for_backward(projection, tau)
        return projection

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        projection, tau = ctx.saved_tensors
        grad_tau = torch.empty_like(tau)
        _launch(_kernels(grad.device).inverse_tau_backward_kernel, (projection.size(0),),
                grad.contiguous(), projection, tau, grad_tau, MIN_TAU, SIZE=projection[0].numel(),
                BLOCK=INVERSE_TAU_BLOCK)
        return None, grad_tau


def fused_inverse_tau(random_matrix: Tensor, tau: Tensor) -> Tensor:
    """:func:`.features.projection_of` of a random matrix that needs no gradient and an fp32 τ,
    through the fused kernels."""
    return _FusedInverseTau.apply(random_matrix, tau)


def fused_inverse_tau_work(device: torch.device) -> bool:
    """As :func:`fused_features_work`, for the temperature's kernels."""
    return _works(device, _CHECKED_INVERSE_TAU, _check_inverse_tau)


def _check_inverse_tau(device: torch.device) -> bool:
    from .features import _InverseTauScaled

    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(3, 40, 16, generator=generator).to(device)
    tau = torch.tensor([0.7, MIN_TAU / 2, 1.3]).to(device).requires_grad_()  # one held at its floor
    weights = torch.randn(3, 40, 16, generator=generator).to(device)
    try:
        fused = fused_inverse_tau(matrix, tau)
        (grad,) = torch.autograd.grad((fused * weights).sum(), tau)
        plain = _InverseTauScaled.apply(matrix, tau)
        (expected,) = torch.autograd.grad((plain * weights).sum(), tau)
    except Exception as error:  # a Triton that cannot compile or run them
        logger.warning("RFA's fused training temperature does not run here (%s: %s); the torch form is taken",
                       type(error).__name__, str(error)[:200])
        return False
    # one division; a sum of 640 products of |w|/τ ≤ 7 by |g| ≤ 5 (grads of order 30): far within both
    agree = torch.allclose(fused, plain, rtol=1e-5, atol=1e-5) and torch.allclose(grad, expected, rtol=1e-3, atol=1e-2)
    if not agree:
        logger.warning("RFA's fused training temperature differs from the torch form here; the torch form is taken")
    return agree
