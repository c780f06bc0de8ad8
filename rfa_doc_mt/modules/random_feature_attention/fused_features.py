"""RFA's Fourier features in training, fused: one Triton kernel forward, one and a batched product
backward (:func:`.triton_kernels.fourier_features_kernel` and its backward).

On a GPU at the paper's batches a training step is bound by launching kernels (docs/benchmarks.md:
about 24 µs of host time per kernel, for the transformer and RFA alike). The training form's
features of a query or key take about seventeen kernels in torch's operators: the unit vectors
(norm, floor, division), the projection, sine, cosine and scale forward; the angles' gradient, its
two products and the unit vectors' backward. Twelve attentions make features twice each per
step. Fused, they take three, and compute the same function: the unit vectors with the norms
floored at :data:`.features.UNIT_NORM_FLOOR`, fp32 products, the backward of
:class:`.features._FourierFeatures` and :class:`.features._UnitVectors`.

Which path runs: :func:`.features.random_fourier_features` takes this one for inputs of one
leading dimension on the device types of :data:`.features.FUSED_FEATURE_DEVICES` (CUDA; the tests
add the CPU under Triton's interpreter) when Triton is installed. The first use in a process
checks both kernels on a small input; if either fails (a Triton that cannot compile them), the
torch form is taken from then on, with a warning.
"""

import logging
import math

import torch
from torch import Tensor

from .features import UNIT_NORM_FLOOR
from .fused import _block, _kernels, _launch, triton_available

logger = logging.getLogger(__name__)
# rows of one program: two tiles of 32 x 64 fp32 (the rows' unit vectors and the angles) in registers
ROWS_BLOCK = 32
# projections of one block of a program's loop
PROJECTIONS_BLOCK = 64
# whether the kernels passed their check in this process (None: not checked yet)
_CHECKED = {}


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
    if not triton_available():
        return False
    if device.type not in _CHECKED:
        _CHECKED[device.type] = _check(device)
    return _CHECKED[device.type]


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

