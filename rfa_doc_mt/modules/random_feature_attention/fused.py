"""RFA's decoding step fused into one Triton kernel per attention (:mod:`.triton_kernels`), for GPUs.

Why: on a GPU a decoding step of paper-size models is bound by launching kernels, not by
arithmetic. The eager step (:func:`.incremental.causal_decoding_step`, :func:`.training.cross_rfa_read`
with :class:`.features.DecodingFeatureMap`) is a dozen small operations per attention per step
(unit vectors, the feature map's product, sine, cosine and scale, the state's gate, update and
readout, the normalisation, beam search's gathers), each a kernel of a few microseconds on
tensors of a few MB; measured on an H100, RFA decoded at 0.25x the transformer's tokens/s at L = 1
(docs/benchmarks.md). Fused, an attention costs three kernels per step: its input projection
(cuBLAS), one Triton kernel from the projections to the normalised output (features, state
update, readout, normaliser: nothing in between goes through memory), and its output projection.

How the fused path differs from the eager one, and why (both compute the same sums):

* causal attention keeps its prefix as the state from the first token. The eager step keeps a
  short prefix as its keys and values (less memory to read on a CPU); on a GPU the state of a
  step is read once by one kernel, and one form needs one kernel. A prefix the eager step left as
  keys is turned into its state once (:func:`.incremental.keys_to_state`), so the paths can take
  turns;
* beam search's reorders are not copied: the rows each beam continues are recorded (composed
  over reorders, as the eager keys form does) and the next step's kernel reads the state at those
  rows and writes it to the other of two buffers; the update writes the whole state anyway, so
  a reorder costs nothing more. Without a reorder the kernel updates the state in place. Finished
  sentences shrink the batch: the first rows of the other buffer serve;
* cross attention reads its source summary as the state ``[S, z]``, which the kernel reads at
  the row of each source still decoding (``rows``, see
  :meth:`.layers.RandomFeatureCrossAttention.reorder_incremental_state`). The keys form, which the
  eager path keeps for short sources, saves memory traffic that a launch-bound GPU step does not
  need; with the state form one kernel serves every source length.

Which path runs: every RFA module has a ``decoding_path`` (:func:`set_decoding_path`):
``"auto"`` (the default) fuses on CUDA tensors when Triton is installed and nothing needs a
gradient, and keeps the eager path everywhere else (on a CPU, the eager path is unchanged);
``"eager"`` never fuses; ``"fused"`` always does (on CPU tensors only under Triton's interpreter,
``TRITON_INTERPRET=1``, which is how the tests check the kernels without a GPU). Two modules have
no kernel and take the eager step on every path: a causal attention with the delta rule
(``--rfa-update delta``, :mod:`.delta`) and a module with local softmax heads (:mod:`.local`).

CUDA graphs were not used: beam search shrinks the batch as sentences finish (a new shape, so a
new graph, at most steps), fairseq's search runs Python between steps, and a graph of the decoder
step would speed up the transformer as much as RFA.
"""

import functools
import importlib.util
import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .features import UNIT_NORM_FLOOR, DecodingFeatureMap
from .incremental import keys_to_state
from .state import NORMALISER_FLOOR, column_major_state

DECODING_PATHS = ("auto", "eager", "fused")
# features of one block of a kernel's loop: 64 x 64 tiles of fp32 fit a program's registers
FEATURE_BLOCK = 64
# tl.dot's smallest operand side (the beams and the head's dimensions are padded to it)
DOT_MIN = 16


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def uses_fused_decoding(module: nn.Module, tensor: Optional[Tensor]) -> bool:
    """Whether ``module`` decodes ``tensor`` (its step's input, or its decoding state) with the
    fused kernels: see the module docstring. The same answer for a module's step and its reorders.
    Never for a causal attention whose state follows the delta rule (``state_update="delta"``,
    :mod:`.delta`: the kernels add to the state) nor for a module with local softmax heads
    (:mod:`.local`: the kernels compute RFA heads only): those decode eagerly on every path."""
    if getattr(module, "state_update", "add") != "add":
        return False
    path = module.decoding_path
    if tensor is None or path == "eager" or getattr(module, "local_heads", 0) or \
            (tensor.requires_grad and torch.is_grad_enabled()):
        return False
    if path == "fused":
        return True
    return tensor.is_cuda and triton_available()


def _kernels(device: torch.device):
    """The kernels module, imported on first use (Triton's import costs time nothing on a CPU
    path should pay); CPU tensors need the interpreter."""
    from . import triton_kernels

    if device.type != "cuda" and type(triton_kernels.causal_step_kernel).__name__ != "InterpretedFunction":
        raise RuntimeError("the fused RFA decoding step runs on CUDA tensors, or on CPU tensors under Triton's "
                           "interpreter (TRITON_INTERPRET=1 set before Triton is first imported)")
    return triton_kernels


def _launch(kernel, grid, *args, **options) -> None:
    """``kernel[grid](...)``; while a profiler runs, inside a ``triton::<kernel>`` annotation, so that
    profiles see each launch as one call (the decode benchmark's kernel counts)."""
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(f"triton::{kernel.__name__}"):
            kernel[grid](*args, **options)
    else:
        kernel[grid](*args, **options)


def _block(size: int, smallest: int = DOT_MIN, largest: Optional[int] = None) -> int:
    block = max(smallest, triton_next_power_of_2(size))
    return block if largest is None else min(block, largest)


def triton_next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _placeholder(device: torch.device, dtype: torch.dtype) -> Tensor:
    """A one-element tensor for a pointer argument a kernel does not read (its flag is off)."""
    return torch.zeros(1, device=device, dtype=dtype)


def _feature_arguments(feature_map: DecodingFeatureMap):
    """weight (W/τ)ᵀ [heads, head_dim, D], offset [heads], D and the fourier scale 1/√D."""
    weight = feature_map.weight.contiguous()
    projections = weight.size(-1)
    return weight, feature_map.offset.reshape(-1).contiguous(), projections, 1.0 / math.sqrt(projections)


def new_state(batch: int, heads: int, features: int, columns: int, device: torch.device) -> Tensor:
    """An uninitialised column-major state [batch, heads, F, columns] fp32 (state.py's layout)."""
    return column_major_state(torch.empty(batch, heads, columns, features, device=device, dtype=torch.float32))


def fused_causal_step(qkv: Tensor, feature_map: DecodingFeatureMap, prefix: Dict[str, Optional[Tensor]],
                      forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tensor:
    """:func:`.incremental.causal_decoding_step` in one kernel: out [batch, heads, dv] in qkv's dtype.

    Args:
        qkv: [batch, 3, heads, head_dim] the in-projection's q, k and v (last dimension contiguous)
        feature_map: the decoding feature map of the module (:class:`.features.DecodingFeatureMap`)
        prefix: as :func:`.incremental.causal_decoding_step` (updated in place): ``state`` (kept
            from the first token), ``rows`` (reorders since the last step, read by the kernel) and
            ``spare_state`` (the buffer a gathering step writes into); keys and values that the
            eager step left are turned into their state first
        forget: [batch, heads] or [batch, heads, F] (None: 1); key_weight: [batch, heads] (None: 1)
    """
    batch, _, heads, head_dim = qkv.shape
    weight, offset, projections, scale = _feature_arguments(feature_map)
    features = 2 * projections if feature_map.sine else projections
    columns = head_dim + 1
    device = qkv.device
    state, rows, spare = prefix.get("state"), prefix.get("rows"), prefix.get("spare_state")
    if prefix.get("keys") is not None:  # a prefix the eager step kept as keys: its state, once
        keys, values = prefix["keys"], prefix["values"]
        if rows is not None:
            keys, values = keys.index_select(0, rows), values.index_select(0, rows)
        state, rows, spare = keys_to_state(keys, values), None, None
    if state is None:
        written = new_state(batch, heads, features, columns, device)
    elif rows is None:
        written = state  # in place: each program reads its tile before it writes it
    else:
        fits = spare is not None and spare.shape[0] >= batch and spare.shape[1:] == state.shape[1:] \
            and spare.stride() == state.stride()
        written = spare[:batch] if fits else new_state(state.size(0), heads, features, columns, device)[:batch]
        spare = state  # the other buffer, for the next gathering step
    if qkv.stride(-1) != 1:
        qkv = qkv.contiguous()
    out = qkv.new_empty(batch, heads, head_dim)
    placeholder = _placeholder(device, torch.float32)
    read = state if state is not None else written
    forget_strides = (0, 0, 0) if forget is None else \
        (forget.stride(0), forget.stride(1), forget.stride(2) if forget.dim() == 3 else 0)
    key_weight_strides = (0, 0) if key_weight is None else key_weight.stride()
    _launch(_kernels(device).causal_step_kernel, (batch, heads),
        qkv, weight, offset, read, written,
        rows if rows is not None else _placeholder(device, torch.long),
        forget if forget is not None else placeholder, key_weight if key_weight is not None else placeholder, out,
        heads, head_dim, head_dim,
        qkv.stride(0), qkv.stride(1), qkv.stride(2),
        *read.stride(), *written.stride(), *forget_strides, *key_weight_strides,
        weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
        scale, UNIT_NORM_FLOOR, NORMALISER_FLOOR,
        PROJECTIONS=projections, FEATURES=features, SINE=feature_map.sine,
        HAS_STATE=state is not None, HAS_ROWS=rows is not None,
        HAS_FORGET=forget is not None, HAS_KEY_WEIGHT=key_weight is not None,
        BLOCK_DIM=_block(head_dim), BLOCK_FEATURES=_block(features, largest=FEATURE_BLOCK),
        BLOCK_VALUES=_block(head_dim), enable_fp_fusion=True)
    prefix.update(state=written, rows=None, spare_state=spare, keys=None, values=None, spare_prefix=None)
    return out


def fused_cross_read(q: Tensor, feature_map: DecodingFeatureMap, summary: Dict[str, Tensor],
                     rows: Optional[Tensor] = None) -> Tensor:
    """:func:`.training.cross_rfa_read` of one decoding step in one kernel, the features of the
    queries included: q [batch, heads, head_dim] (the q-projection's output, ``batch // sources``
    consecutive rows, the beams, per source; last dimension contiguous) → out [batch, heads, dv]
    in q's dtype. Source i reads summary row ``rows[i]`` (None: row i). A summary in the keys form
    is read through its state, built here (decoding on the fused path keeps the state form)."""
    batch, heads, head_dim = q.shape
    weight, offset, projections, scale = _feature_arguments(feature_map)
    features = 2 * projections if feature_map.sine else projections
    state = summary.get("state")
    if state is None:
        state = keys_to_state(summary["keys"], summary["values"])
    stored = state.size(0)
    sources = stored if rows is None else rows.numel()
    beams = batch // sources
    if q.stride(-1) != 1:
        q = q.contiguous()
    out = q.new_empty(batch, heads, head_dim)
    _launch(_kernels(q.device).cross_read_kernel, (sources, heads),
        q, weight, offset, state, rows if rows is not None else _placeholder(q.device, torch.long), out,
        heads, head_dim, head_dim, beams,
        q.stride(0), q.stride(1), *state.stride(),
        weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
        scale, UNIT_NORM_FLOOR, NORMALISER_FLOOR,
        PROJECTIONS=projections, FEATURES=features, SINE=feature_map.sine, HAS_ROWS=rows is not None,
        BLOCK_BEAMS=_block(beams), BLOCK_DIM=_block(head_dim),
        BLOCK_FEATURES=_block(features, largest=FEATURE_BLOCK), BLOCK_VALUES=_block(head_dim),
        enable_fp_fusion=True)
    return out
