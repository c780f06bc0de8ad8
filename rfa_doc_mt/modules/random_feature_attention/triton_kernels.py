"""Triton kernels of RFA's decoding step: one kernel per attention per step (:mod:`.fused`
launches them; the semantics are those of the eager step, :func:`.incremental.causal_rfa_step`
and :func:`.training.cross_rfa_read` with :class:`.features.DecodingFeatureMap`).

Each kernel starts from the attention's projections and ends with its normalised output, in
the model's dtype: the unit vectors, the random feature map, the state's update and its readout
(numerator and normaliser together: the state's last column is z, the state holds ``[v, 1]``),
all in fp32 registers. Nothing between them goes through memory, so a step reads the
projections and the state once and writes the output and the state once.

Importing this module imports Triton, which reads ``TRITON_INTERPRET`` then: with it set
(before the first import of Triton in the process) the kernels run on CPU tensors in Triton's
interpreter, which is how the tests check them on a machine without a GPU.
"""

import triton
import triton.language as tl


@triton.jit
def causal_step_kernel(qkv, weight, offset, state_in, state_out, rows, forget, key_weight, out,
                       heads, head_dim, value_dim,
                       qkv_row, qkv_part, qkv_head,
                       in_row, in_head, in_feature, in_column,
                       state_row, state_head, state_feature, state_column,
                       forget_row, forget_head, forget_feature, key_weight_row, key_weight_head,
                       weight_head, weight_dim, out_row, out_head,
                       scale, unit_floor, normaliser_floor, PROJECTIONS: tl.constexpr, FEATURES: tl.constexpr,
                       SINE: tl.constexpr, HAS_STATE: tl.constexpr, HAS_ROWS: tl.constexpr,
                       HAS_FORGET: tl.constexpr, HAS_KEY_WEIGHT: tl.constexpr,
                       BLOCK_DIM: tl.constexpr, BLOCK_FEATURES: tl.constexpr, BLOCK_VALUES: tl.constexpr):
    """One token of causal RFA for one (row, head): program (row, head).

    The number of random projections D (``PROJECTIONS``) and of features F (``FEATURES``: 2D for
    the fourier map, D for the positive one) are compile-time constants, fixed for a model: the
    loop over feature blocks has a known trip count, and Triton 3.6's interpreter, which cannot
    take a loop's bound from a run-time argument or from arithmetic on a constant, runs it too.

    qkv [batch, 3, heads, head_dim] (the in-projection's output, any float dtype); weight (W/τ)ᵀ
    [heads, head_dim, D] and offset [heads] fp32 (:class:`.features.DecodingFeatureMap`); the state
    read at row ``rows[row]`` (HAS_ROWS: beam search's reorders, gathered on read) of ``state_in``
    and written at ``row`` of ``state_out`` ([rows, heads, F, dv + 1] fp32, any strides; the same
    tensor when nothing is gathered: each program reads its own tile before writing it);
    ``forget`` [batch, heads] or [batch, heads, F] (``forget_feature`` 0 for one gate per head);
    ``key_weight`` [batch, heads]; out [batch, heads, dv] in its own dtype::

        S = f S + c φ(k) [v, 1]ᵀ,   out = (φ(q) S)[:dv] / max((φ(q) S)[dv], floor)
    """
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    columns = tl.arange(0, BLOCK_VALUES)
    column_mask = columns < value_dim
    projected = qkv + row * qkv_row + head * qkv_head
    q = tl.load(projected + dims, mask=dim_mask, other=0.0).to(tl.float32)
    k = tl.load(projected + qkv_part + dims, mask=dim_mask, other=0.0).to(tl.float32)
    v = tl.load(projected + 2 * qkv_part + columns, mask=column_mask, other=0.0).to(tl.float32)
    q = q / tl.maximum(tl.sqrt(tl.sum(q * q, axis=0)), unit_floor)
    k = k / tl.maximum(tl.sqrt(tl.sum(k * k, axis=0)), unit_floor)
    source = row
    if HAS_ROWS:
        source = tl.load(rows + row).to(tl.int64)
    read = state_in + source * in_row + head * in_head
    written = state_out + row * state_row + head * state_head
    numerator = tl.zeros([BLOCK_VALUES], dtype=tl.float32)
    mass = tl.zeros([BLOCK_FEATURES], dtype=tl.float32)  # per lane, summed once at the end
    for start in range(0, FEATURES, BLOCK_FEATURES):
        feature = start + tl.arange(0, BLOCK_FEATURES)
        feature_mask = feature < FEATURES
        # fourier: features [sin P, cos P], so feature f reads projection f mod D
        projection = tl.where(feature < PROJECTIONS, feature, feature - PROJECTIONS) if SINE else feature
        w = tl.load(weight + head * weight_head + dims[:, None] * weight_dim + projection[None, :],
                    mask=dim_mask[:, None] & feature_mask[None, :], other=0.0)
        angle_q = tl.sum(q[:, None] * w, axis=0)
        angle_k = tl.sum(k[:, None] * w, axis=0)
        if SINE:
            phi_q = tl.where(feature < PROJECTIONS, tl.sin(angle_q), tl.cos(angle_q)) * scale
            phi_k = tl.where(feature < PROJECTIONS, tl.sin(angle_k), tl.cos(angle_k)) * scale
        else:
            shift = tl.load(offset + head)
            phi_q = tl.exp(angle_q + shift)
            phi_k = tl.exp(angle_k + shift)
        phi_q = tl.where(feature_mask, phi_q, 0.0)
        phi_k = tl.where(feature_mask, phi_k, 0.0)
        if HAS_KEY_WEIGHT:
            phi_k = phi_k * tl.load(key_weight + row * key_weight_row + head * key_weight_head).to(tl.float32)
        tile_mask = feature_mask[:, None] & column_mask[None, :]
        values = phi_k[:, None] * v[None, :]
        normaliser = phi_k
        if HAS_STATE:
            s = tl.load(read + feature[:, None] * in_feature + columns[None, :] * in_column, mask=tile_mask,
                        other=0.0)
            z = tl.load(read + feature * in_feature + value_dim * in_column, mask=feature_mask, other=0.0)
            if HAS_FORGET:
                gate = tl.load(forget + row * forget_row + head * forget_head + feature * forget_feature,
                               mask=feature_mask, other=1.0).to(tl.float32)
                s = s * gate[:, None]
                z = z * gate
            values = s + values
            normaliser = z + normaliser
        tl.store(written + feature[:, None] * state_feature + columns[None, :] * state_column, values,
                 mask=tile_mask)
        tl.store(written + feature * state_feature + value_dim * state_column, normaliser, mask=feature_mask)
        numerator += tl.sum(phi_q[:, None] * values, axis=0)
        mass += phi_q * normaliser
    result = numerator / tl.maximum(tl.sum(mass, axis=0), normaliser_floor)
    tl.store(out + row * out_row + head * out_head + columns, result.to(out.dtype.element_ty), mask=column_mask)


@triton.jit
def cross_read_kernel(query, weight, offset, state, rows, out,
                      heads, head_dim, value_dim, beams,
                      query_row, query_head,
                      state_row, state_head, state_feature, state_column,
                      weight_head, weight_dim, out_row, out_head,
                      scale, unit_floor, normaliser_floor, PROJECTIONS: tl.constexpr, FEATURES: tl.constexpr,
                      SINE: tl.constexpr, HAS_ROWS: tl.constexpr, BLOCK_BEAMS: tl.constexpr,
                      BLOCK_DIM: tl.constexpr, BLOCK_FEATURES: tl.constexpr, BLOCK_VALUES: tl.constexpr):
    """Cross RFA's read of a cached source summary by the beams of one source, one head:
    program (source, head).

    query [batch, heads, head_dim] (the q-projection's output, rows ``source x beams + beam``);
    weight and offset as :func:`causal_step_kernel`; state [stored, heads, F, dv + 1] fp32 (any
    strides), read at row ``rows[source]`` (HAS_ROWS: the sources still decoding, gathered on read)
    or ``source``; out [batch, heads, dv]. The products go through ``tl.dot`` in full fp32
    (``input_precision="ieee"``: TF32 would round the features to 10 bits)."""
    source = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    beam = tl.arange(0, BLOCK_BEAMS)
    beam_mask = beam < beams
    query_rows = source * beams + beam
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    columns = tl.arange(0, BLOCK_VALUES)
    column_mask = columns < value_dim
    x = tl.load(query + query_rows[:, None] * query_row + head * query_head + dims[None, :],
                mask=beam_mask[:, None] & dim_mask[None, :], other=0.0).to(tl.float32)
    units = x / tl.maximum(tl.sqrt(tl.sum(x * x, axis=1)), unit_floor)[:, None]
    stored = source
    if HAS_ROWS:
        stored = tl.load(rows + source).to(tl.int64)
    read = state + stored * state_row + head * state_head
    numerator = tl.zeros([BLOCK_BEAMS, BLOCK_VALUES], dtype=tl.float32)
    mass = tl.zeros([BLOCK_BEAMS], dtype=tl.float32)
    for start in range(0, FEATURES, BLOCK_FEATURES):
        feature = start + tl.arange(0, BLOCK_FEATURES)
        feature_mask = feature < FEATURES
        projection = tl.where(feature < PROJECTIONS, feature, feature - PROJECTIONS) if SINE else feature
        w = tl.load(weight + head * weight_head + dims[:, None] * weight_dim + projection[None, :],
                    mask=dim_mask[:, None] & feature_mask[None, :], other=0.0)
        angles = tl.dot(units, w, input_precision="ieee")  # [beams, features]
        if SINE:
            phi = tl.where(feature[None, :] < PROJECTIONS, tl.sin(angles), tl.cos(angles)) * scale
        else:
            phi = tl.exp(angles + tl.load(offset + head))
        phi = tl.where(feature_mask[None, :], phi, 0.0)
        s = tl.load(read + feature[:, None] * state_feature + columns[None, :] * state_column,
                    mask=feature_mask[:, None] & column_mask[None, :], other=0.0)
        z = tl.load(read + feature * state_feature + value_dim * state_column, mask=feature_mask, other=0.0)
        numerator += tl.dot(phi, s, input_precision="ieee")
        mass += tl.sum(phi * z[None, :], axis=1)
    result = numerator / tl.maximum(mass, normaliser_floor)[:, None]
    tl.store(out + query_rows[:, None] * out_row + head * out_head + columns[None, :],
             result.to(out.dtype.element_ty), mask=beam_mask[:, None] & column_mask[None, :])


def compile_kernels(capability: int = 90, warp_size: int = 32) -> dict:
    """Compile the kernels for an NVIDIA GPU of compute ``capability`` (90: H100) with Triton's own
    compiler, down to the GPU's binary (cubin); no GPU or driver is needed. Every constexpr branch
    is compiled on (fourier map, a state read at gathered rows, per-feature forget gates, key
    weights, bf16 inputs) and off (positive map, empty prefix, fp32). Returns each variant's cubin
    size in bytes. Not possible under the interpreter (``TRITON_INTERPRET=1``): run it without."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", capability, warp_size)
    floats = ("scale", "unit_floor", "normaliser_floor")
    variants = {
        "causal, fourier, gathered state, gates, bf16": (causal_step_kernel, dict(
            SINE=True, HAS_STATE=True, HAS_ROWS=True, HAS_FORGET=True, HAS_KEY_WEIGHT=True), "*bf16"),
        "causal, positive, empty prefix, fp32": (causal_step_kernel, dict(
            SINE=False, HAS_STATE=False, HAS_ROWS=False, HAS_FORGET=False, HAS_KEY_WEIGHT=False), "*fp32"),
        "cross, fourier, gathered sources, bf16": (cross_read_kernel, dict(SINE=True, HAS_ROWS=True), "*bf16"),
        "cross, positive, fp32": (cross_read_kernel, dict(SINE=False, HAS_ROWS=False), "*fp32"),
    }
    sizes = {}
    for name, (kernel, flags, io_type) in variants.items():
        # the paper's sizes: 64-wide heads, 64 causal projections (128 features), 256 cross (512) in blocks of 64
        projections = 256 if kernel is cross_read_kernel else 64
        constants = dict(flags, BLOCK_DIM=64, BLOCK_FEATURES=64, BLOCK_VALUES=64, PROJECTIONS=projections,
                         FEATURES=2 * projections if flags["SINE"] else projections)
        if kernel is cross_read_kernel:
            constants["BLOCK_BEAMS"] = 16
        signature = {}
        for argument in kernel.arg_names:
            if argument in constants:
                signature[argument] = "constexpr"
            elif argument in ("qkv", "query", "out"):
                signature[argument] = io_type
            elif argument == "rows":
                signature[argument] = "*i64"
            elif argument in ("weight", "offset", "state", "state_in", "state_out", "forget", "key_weight"):
                signature[argument] = "*fp32"
            else:
                signature[argument] = "fp32" if argument in floats else "i32"
        compiled = triton.compile(ASTSource(kernel, signature, constants), target=target,
                                  options={"enable_fp_fusion": True})
        sizes[name] = len(compiled.asm["cubin"])
    return sizes
