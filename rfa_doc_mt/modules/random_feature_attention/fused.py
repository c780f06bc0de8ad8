"""RFA's decoding step fused into one Triton kernel per attention (:mod:`.triton_kernels`), and one
more for its local softmax heads, for GPUs.

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

Local softmax heads (:mod:`.local`: ``--rfa-cross-local-heads``, ``--rfa-causal-local-heads``)
have a kernel each, launched beside the RFA heads' kernel; both write into one output of every
head (no concatenation), so that an attention with local heads costs four launches per step:

* cross (:func:`fused_local_cross_step`): a program per row and local head counts the row's target
  sentence (its count from the last step plus the step's start), finds the aligned source sentence
  in the source cache's per-sentence index (:func:`.local.local_cross_cache`, the eager path's,
  built once per batch) and reads that sentence's keys and values once, softmax in fp32 (online:
  a running maximum and sum over blocks of keys). The count lives on the device, one per row and
  head (a program writes only its own); beam search's reorders are recorded
  (``fused_sentence_order``) and gathered on read, into the other of two buffers;
* causal (:func:`fused_local_causal_step`): each row keeps its current sentence's keys and values
  from position 0 of a buffer [rows, local heads, capacity, head_dim] and their count. A program
  reads the row it continues (beam search's ``rows``, the ones recorded for the RFA state),
  attends over its sentence and its own key, writes those keys to its row of the other buffer
  when rows were gathered (in place otherwise, like the state) and appends its key; a token that
  starts a sentence reads none. The host keeps an upper bound on the counts (one more per step),
  which the buffer's capacity must exceed: when it reaches the capacity, the counts are read back
  (sentences that started since hold fewer) and the buffer widened to twice the longest current
  sentence, so that a read back comes once in as many steps as that sentence has tokens, not every
  step.

Why kernels of our own and not ``scaled_dot_product_attention`` on the gathered keys, as the
eager step does: the step is launch-bound, and that library kernel needs its inputs gathered and
masked first. The eager cross step launches about 20 kernels per layer per step (the aligned
sentence from the index, the gathers of its first position, length, keys and values, the mask,
the attention, the concatenation with the RFA heads, the reorder of the sentence counts) and reads
the longest aligned sentence back to the host (the gathered width), which stalls the launch queue
every step; the eager causal step as many, and a read back to drop the keys no row reads. Each
kernel does the gathers, the masks and the softmax in one launch, reads only its row's own
sentence, and keeps its counts on the device; a query per row and head is a matrix-vector
product, which needs no tensor cores (FlashAttention's variable-length kernels, or FlexAttention,
would need the same gathers or a block mask built every step). Compiled for a GPU, the loops
over keys run to each row's own length, read in the kernel: one compiled variant whatever the
sentences, no work past a row's sentence. In Triton's interpreter (the tests, the benchmark's dry
run) they run to a constexpr instead, since Triton 3.6's interpreter takes a loop's bound from a
constexpr only: the longest source sentence (read back once per batch) or the causal bound,
rounded up to a power of two of at least one block, the masks giving each row its own
(:data:`LOCAL_DYNAMIC_LOOP` chooses; the tests run both loops).

Which path runs: every RFA module has a ``decoding_path`` (:func:`set_decoding_path`):
``"auto"`` (the default) fuses on CUDA tensors when Triton is installed and nothing needs a
gradient, and keeps the eager path everywhere else (on a CPU, the eager path is unchanged);
``"eager"`` never fuses; ``"fused"`` always does (on CPU tensors only under Triton's interpreter,
``TRITON_INTERPRET=1``, which is how the tests check the kernels without a GPU). Local heads follow
their module's path. One module has no kernel and takes the eager step on every path: a causal
attention with the delta rule (``--rfa-update delta``, :mod:`.delta`), its local heads included.
The eager step's caches can be taken over by the fused step (a prefix kept as keys, local heads'
keys, sentence counts), not the other way round.

CUDA graphs were not used: beam search shrinks the batch as sentences finish (a new shape, so a
new graph, at most steps), fairseq's search runs Python between steps, and a graph of the decoder
step would speed up the transformer as much as RFA.
"""

import functools
import importlib.util
import logging
import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .features import UNIT_NORM_FLOOR, DecodingFeatureMap
from .incremental import keys_to_state
from .local import LOCAL_CAUSAL_NAMES
from .state import NORMALISER_FLOOR, column_major_state

DECODING_PATHS = ("auto", "eager", "fused")
# features of one block of a kernel's loop (the cross read's: projections, each giving a sine and a
# cosine feature with the fourier map): 64 x 64 tiles of fp32 fit a program's registers
FEATURE_BLOCK = 64
# tl.dot's smallest operand side (the beams and the head's dimensions are padded to it)
DOT_MIN = 16
# how the cross read's products (the queries' features, and their read of the summary) are taken:
# "tf32x3", each fp32 operand split into two TF32 parts and three products on the tensor cores (an
# error per product of about 2^-22 of its size, near fp32's 2^-24), or "ieee", fp32 on the CUDA cores.
# With the beams padded to DOT_MIN rows, fp32 products on the CUDA cores cost more than reading the
# summary: on an H200 the read alone takes 2.28x as long with them as in tf32x3, outputs 1.9e-6 apart
# (docs/benchmarks.md; scripts/bench_gpu.sh times it at both precisions). Triton's interpreter
# takes both in fp32. A Triton that cannot
# compile "tf32x3" falls back to "ieee", once, with a warning (_cross_precision).
CROSS_DOT_PRECISION = "tf32x3"
# the cross read's launch settings where a call gives none (block, num_warps, num_stages: see
# fused_cross_read); empty: a block of up to FEATURE_BLOCK projections and Triton's defaults. Set
# from a GPU's own sweep (readout_bandwidth --sweep, decode_speed --cross-read-launch); settings that
# fail to compile for some call are dropped, with a warning, from then on
CROSS_READ_LAUNCH: Dict[str, int] = {}
# keys of one block of the local heads' loop (32 x 64 tiles of keys and of values in registers):
# a sentence of up to 32 tokens in one block, the lengths masked per row
LOCAL_KEY_BLOCK = 32
# the positions a causal local head's buffer holds per row at first (twice the longest current
# sentence once it needs more)
LOCAL_CAPACITY = 32
# whether the local heads' kernels loop to each row's own length (True), or to a constexpr bound on
# every row's, rounded up to a power of two (False); None: the first on CUDA tensors, where the
# kernels are compiled (no variant to compile per bound, no work past a row's sentence), the second
# in Triton's interpreter, whose version 3.6 takes a loop's bound from a constexpr only
LOCAL_DYNAMIC_LOOP = None
# what the fused step of causal local heads keeps (fused_local_causal_step): each row's current
# sentence's keys and values [rows, heads, capacity, head_dim], how many [rows, heads] int32, and an
# upper bound on those counts on the host (a CPU tensor: the kernel's loop length is a constexpr);
# the spare buffers a gathering step writes into
FUSED_LOCAL_CAUSAL_NAMES = ("fused_local_keys", "fused_local_values", "fused_local_length", "fused_local_bound")
LOCAL_CAUSAL_SPARE_NAMES = ("spare_local_keys", "spare_local_values", "spare_local_length")
# what the fused step of cross local heads keeps beside the source's cache (fused_local_cross_step):
# each row's target sentence [rows, heads] int32, beam search's reorders since the last step, and the
# longest source sentence's length rounded to blocks (a CPU tensor)
FUSED_LOCAL_CROSS_NAMES = ("fused_sentence", "fused_sentence_order", "fused_key_span")


logger = logging.getLogger(__name__)
# the precisions of the cross read that failed to compile in this process (_cross_precision)
_FAILED_PRECISIONS = set()


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def uses_fused_decoding(module: nn.Module, tensor: Optional[Tensor]) -> bool:
    """Whether ``module`` decodes ``tensor`` (its step's input, or its decoding state) with the
    fused kernels: see the module docstring. The same answer for a module's step and its reorders,
    and for a module with local softmax heads (:mod:`.local`) as for one without: their kernels
    come with the RFA heads'. Never for a causal attention whose state follows the delta rule
    (``state_update="delta"``, :mod:`.delta`: the kernels add to the state), which decodes eagerly
    on every path, its local heads included, nor for a module evaluated with other matrices than
    its own (:meth:`.layers._RandomFeatureAttentionBase.evaluate_with_bank`)."""
    if getattr(module, "state_update", "add") != "add":
        return False
    if module.random_matrices.evaluation_override is not None:  # the kernels take the configured features
        return False
    path = module.decoding_path
    if tensor is None or path == "eager" or (tensor.requires_grad and torch.is_grad_enabled()):
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
                      forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None,
                      out: Optional[Tensor] = None) -> Tensor:
    """:func:`.incremental.causal_decoding_step` in one kernel: out [batch, heads, dv] in qkv's dtype
    (``out``: written there, e.g. the RFA heads' part of a module's output, any strides but the last).

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
    if out is None:
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


def _cross_precision(precision: Optional[str]) -> str:
    """The precision the cross read's products take: ``precision`` or :data:`CROSS_DOT_PRECISION`,
    unless it failed to compile in this process (then ``"ieee"``)."""
    precision = precision or CROSS_DOT_PRECISION
    if precision not in ("ieee", "tf32x3"):
        raise ValueError(f"the cross read's products are 'ieee' or 'tf32x3', not {precision!r}")
    return "ieee" if precision in _FAILED_PRECISIONS else precision


def check_cross_read_launch(launch: Optional[Dict[str, int]]) -> None:
    """A ValueError unless ``launch`` holds only a block (a power of 2 from DOT_MIN), num_warps and
    num_stages (positive integers)."""
    settings = dict(launch or {})
    block = settings.get("block", DOT_MIN)
    if not all(isinstance(value, int) and value > 0 for value in settings.values()) or block < DOT_MIN or \
            block & (block - 1) or set(settings) - {"block", "num_warps", "num_stages"}:
        raise ValueError(f"the cross read's launch takes a block (a power of 2 from {DOT_MIN}), num_warps and "
                         f"num_stages, not {launch}")


def parse_cross_read_launch(text: str) -> Dict[str, int]:
    """``"block=64,num_warps=8,num_stages=3"`` (any of them; empty: none) → its settings, checked."""
    launch = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise ValueError(f"the cross read's launch settings are name=integer, not {item!r}")
        launch[name.strip()] = int(value)
    check_cross_read_launch(launch)
    return launch


def fused_cross_read(q: Tensor, feature_map: DecodingFeatureMap, summary: Dict[str, Tensor],
                     rows: Optional[Tensor] = None, out: Optional[Tensor] = None,
                     precision: Optional[str] = None, launch: Optional[Dict[str, int]] = None) -> Tensor:
    """:func:`.training.cross_rfa_read` of one decoding step in one kernel, the features of the
    queries included: q [batch, heads, head_dim] (the q-projection's output, ``batch // sources``
    consecutive rows, the beams, per source; last dimension contiguous) → out [batch, heads, dv]
    in q's dtype (``out``: written there, as :func:`fused_causal_step`). Source i reads summary row
    ``rows[i]`` (None: row i). A summary in the keys form is read through its state, built here
    (decoding on the fused path keeps the state form). ``precision``: of the kernel's products,
    ``"tf32x3"`` or ``"ieee"`` (None: :data:`CROSS_DOT_PRECISION`); a Triton that cannot compile
    ``"tf32x3"`` takes ``"ieee"`` instead, with a warning, from then on. ``launch``: the kernel's
    launch settings, any of ``block`` (projections per block of its loop, a power of 2 from
    DOT_MIN), ``num_warps`` and ``num_stages`` (the readout benchmark's sweep; a setting that fails
    is the caller's to report); None: :data:`CROSS_READ_LAUNCH`."""
    if launch:  # a caller's settings, checked here; the configured ones were checked when set
        check_cross_read_launch(launch)
    batch, heads, head_dim = q.shape
    weight, offset, projections, scale = _feature_arguments(feature_map)
    state = summary.get("state")
    if state is None:
        state = keys_to_state(summary["keys"], summary["values"])
    stored = state.size(0)
    sources = stored if rows is None else rows.numel()
    beams = batch // sources
    if q.stride(-1) != 1:
        q = q.contiguous()
    if out is None:
        out = q.new_empty(batch, heads, head_dim)
    chosen = _cross_precision(precision)

    def run(dot_precision: str, settings: Dict[str, int]) -> None:
        settings = dict(settings)
        block = settings.pop("block", None) or _block(projections, largest=FEATURE_BLOCK)
        _launch(_kernels(q.device).cross_read_kernel, (sources, heads),
            q, weight, offset, state, rows if rows is not None else _placeholder(q.device, torch.long), out,
            heads, head_dim, head_dim, beams,
            q.stride(0), q.stride(1), *state.stride(),
            weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
            scale, UNIT_NORM_FLOOR, NORMALISER_FLOOR,
            PROJECTIONS=projections, SINE=feature_map.sine, HAS_ROWS=rows is not None,
            DOT_PRECISION=dot_precision, BLOCK_BEAMS=_block(beams), BLOCK_DIM=_block(head_dim),
            BLOCK_FEATURES=block, BLOCK_VALUES=_block(head_dim), enable_fp_fusion=True, **settings)

    if launch:  # settings of a sweep: what fails to compile is theirs to report
        run(chosen, launch)
        return out
    if CROSS_READ_LAUNCH:
        try:
            run(chosen, CROSS_READ_LAUNCH)
            return out
        except Exception as error:  # settings that do not compile for this call: the defaults, from now on
            logger.warning("the fused cross read's launch settings %s failed (%s: %s); it takes the defaults from "
                           "now on", CROSS_READ_LAUNCH, type(error).__name__, str(error)[:200])
            CROSS_READ_LAUNCH.clear()
    if chosen == "ieee":
        run(chosen, {})
        return out
    try:
        run(chosen, {})
    except Exception as error:  # a compiler that lacks the split products: fp32 ones, from now on
        _FAILED_PRECISIONS.add(chosen)
        logger.warning("the fused cross read could not be compiled with %s products (%s: %s); it takes fp32 "
                       "products ('ieee') from now on", chosen, type(error).__name__, str(error)[:200])
        run("ieee", {})
    return out


# ---- local softmax heads (.local) ----------------------------------------------------------------


def _dynamic_loop(device: torch.device) -> bool:
    """Whether the local heads' kernels loop to each row's length (:data:`LOCAL_DYNAMIC_LOOP`)."""
    return device.type == "cuda" if LOCAL_DYNAMIC_LOOP is None else LOCAL_DYNAMIC_LOOP


def _flags(flags: Tensor) -> Tensor:
    """A bool tensor as bytes (a view, no copy): what the kernels read."""
    return flags.view(torch.uint8) if flags.dtype == torch.bool else flags


def _widened(keys: Tensor, capacity: int) -> Tensor:
    """keys [rows, heads, kept, dim] in a buffer of ``capacity`` positions (the first kept filled)."""
    wider = keys.new_empty(keys.size(0), keys.size(1), capacity, keys.size(3))
    wider[:, :, :keys.size(2)] = keys
    return wider


def _causal_cache_from_eager(cache: Dict[str, Optional[Tensor]]) -> None:
    """The current sentences the eager step kept (:func:`.local.local_causal_step`: keys and values
    [rows, heads, kept, dim], and which of them each row reads) in the fused step's form: each row's
    keys first, counted per head. Once, where the paths take turns; beam search's reorders were
    applied to them already."""
    keys, values, valid = (cache.pop(name) for name in LOCAL_CAUSAL_NAMES)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # the keys read first, in order
    gather = order[:, None, :, None].expand_as(keys)
    count = valid.sum(1, dtype=torch.int32)
    bound = int(count.max())
    capacity = max(LOCAL_CAPACITY, triton_next_power_of_2(2 * (bound + 1)))
    cache.update(fused_local_keys=_widened(keys.gather(2, gather), capacity),
                 fused_local_values=_widened(values.gather(2, gather), capacity),
                 fused_local_length=count[:, None].expand(-1, keys.size(1)).contiguous(),
                 fused_local_bound=torch.tensor(bound), spare_local_keys=None, spare_local_values=None,
                 spare_local_length=None)


def fused_local_causal_step(qkv: Tensor, cache: Dict[str, Optional[Tensor]], starts: Tensor,
                            real: Optional[Tensor] = None, rows: Optional[Tensor] = None,
                            out: Optional[Tensor] = None) -> Tensor:
    """:func:`.local.local_causal_step` in one kernel: the causal local heads' step, out [batch,
    local heads, head_dim] in qkv's dtype (``out``: written there).

    Args:
        qkv: [batch, 3, local heads, head_dim] the local heads' q, k and v (a view of the
            in-projection's output; last dimension contiguous)
        cache: updated in place: :data:`FUSED_LOCAL_CAUSAL_NAMES` (empty: nothing before), each row's
            current sentence's keys and values [rows, heads, capacity, head_dim] and how many
            [rows, heads], an upper bound on those counts kept on the host (a CPU tensor), and the
            spare buffers (``spare_local_*``) a gathering step writes into; a cache the eager step
            left (:data:`.local.LOCAL_CAUSAL_NAMES`) is taken over first
        starts: [batch] bool, the token starts a sentence; real: [batch] bool (None: all real)
        rows: [batch] the row each row continues (beam search's reorders since the last step,
            composed: the causal module records them for its RFA state, and its local heads read them
            too); None: row i continues row i
    """
    batch, _, heads, head_dim = qkv.shape
    device = qkv.device
    if cache.get(LOCAL_CAUSAL_NAMES[2]) is not None:
        _causal_cache_from_eager(cache)
        rows = None
    keys, values, length = (cache.get(name) for name in FUSED_LOCAL_CAUSAL_NAMES[:3])
    bound = 0 if keys is None else int(cache[FUSED_LOCAL_CAUSAL_NAMES[3]])
    if keys is None:
        keys = qkv.new_empty(batch, heads, LOCAL_CAPACITY, head_dim)
        values = torch.empty_like(keys)
    elif bound + 1 > keys.size(2):
        # the bound counts every step since it was read: read the counts back (sentences that started
        # since hold fewer keys), and widen the buffers to twice what they need, so that this happens
        # once in as many steps as the longest current sentence has tokens
        bound = int(length.max())
        if 2 * (bound + 1) > keys.size(2):
            capacity = triton_next_power_of_2(2 * (bound + 1))
            keys, values = _widened(keys, capacity), _widened(values, capacity)
            cache.update(spare_local_keys=None, spare_local_values=None)
    if rows is None:  # in place: each program reads its own keys before it writes after them
        written = (keys, values, length if length is not None else
                   torch.empty(batch, heads, dtype=torch.int32, device=device))
        spares = tuple(cache.get(name) for name in LOCAL_CAUSAL_SPARE_NAMES)
    else:  # gathered on read into the other buffers; finished sentences shrink the batch into their first rows
        spares = tuple(cache.get(name) for name in LOCAL_CAUSAL_SPARE_NAMES)
        if spares[0] is None or spares[0].size(0) < batch or spares[0].shape[1:] != keys.shape[1:]:
            spares = (torch.empty_like(keys), torch.empty_like(values), torch.empty_like(length))
        written = tuple(spare[:batch] for spare in spares)
        spares = (keys, values, length)
    written_keys, written_values, written_length = written
    if out is None:
        out = qkv.new_empty(batch, heads, head_dim)
    if qkv.stride(-1) != 1:
        qkv = qkv.contiguous()
    placeholder = _placeholder(device, torch.uint8)
    dynamic = _dynamic_loop(device)
    _launch(_kernels(device).local_causal_step_kernel, (batch, heads),
        qkv, keys, values, length if length is not None else _placeholder(device, torch.int32),
        written_keys, written_values, written_length, rows if rows is not None else _placeholder(device, torch.long),
        _flags(starts), _flags(real) if real is not None else placeholder, out, head_dim,
        qkv.stride(0), qkv.stride(1), qkv.stride(2),
        keys.stride(0), keys.stride(1), keys.stride(2),
        written_keys.stride(0), written_keys.stride(1), written_keys.stride(2),
        length.stride(0) if length is not None else 0, written_length.stride(0), starts.stride(0),
        real.stride(0) if real is not None else 0, out.stride(0), out.stride(1), head_dim ** -0.5,
        HAS_CACHE=length is not None, HAS_ROWS=rows is not None, HAS_REAL=real is not None,
        DYNAMIC=dynamic, KEY_SPAN=0 if dynamic else _block(bound, smallest=LOCAL_KEY_BLOCK),
        BLOCK_KEYS=LOCAL_KEY_BLOCK, BLOCK_DIM=_block(head_dim), enable_fp_fusion=True)
    cache.update(zip(FUSED_LOCAL_CAUSAL_NAMES, (written_keys, written_values, written_length,
                                                torch.tensor(bound + 1))))
    cache.update(zip(LOCAL_CAUSAL_SPARE_NAMES, spares))
    return out


def fused_local_cross_step(q: Tensor, cache: Dict[str, Optional[Tensor]], starts: Tensor,
                           rows: Optional[Tensor] = None, out: Optional[Tensor] = None) -> Tensor:
    """:func:`.local.local_cross_step` in one kernel, with the count of each row's target sentence:
    the cross local heads' step, out [batch, local heads, head_dim] in q's dtype (``out``: written
    there).

    Args:
        q: [batch, local heads, head_dim] the local heads' queries (a view of the q-projection's
            output, ``batch // sources`` consecutive rows, the beams, per source; last dimension
            contiguous)
        cache: the cross attention's decoding buffer: the sources' local keys and values and their
            per-sentence index (:data:`.local.LOCAL_CROSS_NAMES`, :func:`.local.local_cross_cache`),
            and, updated in place, :data:`FUSED_LOCAL_CROSS_NAMES`: each row's target sentence
            [rows, heads] int32 (none before the first step), beam search's reorders since the last
            step (``fused_sentence_order``, recorded by the module's reorder and gathered on read),
            the longest sentence's block-rounded length (a CPU tensor, found once) and the spare
            buffer a gathering step writes into; the eager step's ``local_sentence`` is taken over
        starts: [batch] bool, the token a row predicts starts the next target sentence
        rows: the source each source still decoding reads (the module's ``rows``); None: source i
    """
    batch, heads, head_dim = q.shape
    device = q.device
    keys, values = cache["local_keys"], cache["local_values"]
    first, length, last = cache["local_first"], cache["local_length"], cache["local_last"]
    stored = keys.size(0)
    sources = stored if rows is None else rows.numel()
    dynamic = _dynamic_loop(device)
    span = cache.get(FUSED_LOCAL_CROSS_NAMES[2])
    if span is None:  # the longest sentence of the sources: read back once per batch (for a constexpr loop)
        span = torch.tensor(0 if dynamic else _block(int(length.max()), smallest=LOCAL_KEY_BLOCK))
    if cache.get("local_sentence") is not None:  # the eager step's count (reordered already)
        cache[FUSED_LOCAL_CROSS_NAMES[0]] = cache.pop("local_sentence").to(torch.int32)[:, None].expand(
            -1, heads).contiguous()
        cache[FUSED_LOCAL_CROSS_NAMES[1]] = None
    sentence, order, spare = (cache.get(name) for name in FUSED_LOCAL_CROSS_NAMES[:2] + ("spare_sentence",))
    if sentence is None:
        written = torch.empty(batch, heads, dtype=torch.int32, device=device)
    elif order is None:
        written = sentence  # in place: each program reads and writes its own entry
    else:
        if spare is None or spare.size(0) < batch or spare.shape[1:] != sentence.shape[1:]:
            spare = torch.empty_like(sentence)
        written, spare = spare[:batch], sentence
    if out is None:
        out = q.new_empty(batch, heads, head_dim)
    if q.stride(-1) != 1:
        q = q.contiguous()
    placeholder = _placeholder(device, torch.long)
    _launch(_kernels(device).local_cross_step_kernel, (batch, heads),
        q, keys, values, first, length, last, rows if rows is not None else placeholder,
        order if order is not None else placeholder, _flags(starts),
        sentence if sentence is not None else _placeholder(device, torch.int32), written, out,
        batch // sources, head_dim, q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), keys.stride(2),
        first.stride(0), first.stride(1), last.stride(0), sentence.stride(0) if sentence is not None else 0,
        written.stride(0), starts.stride(0), out.stride(0), out.stride(1), head_dim ** -0.5,
        HAS_SENTENCE=sentence is not None, HAS_ROWS=rows is not None, HAS_ORDER=order is not None,
        DYNAMIC=dynamic, KEY_SPAN=int(span), BLOCK_KEYS=LOCAL_KEY_BLOCK, BLOCK_DIM=_block(head_dim),
        enable_fp_fusion=True)
    cache.update(zip(FUSED_LOCAL_CROSS_NAMES, (written, None, span)))
    cache["spare_sentence"] = spare
    return out
