"""Triton kernels of RFA's decoding step: one kernel per attention per step (:mod:`.fused`
launches them; the semantics are those of the eager step, :func:`.incremental.causal_rfa_step`
and :func:`.training.cross_rfa_read` with :class:`.features.DecodingFeatureMap`), and one for
its local softmax heads (:func:`.local.local_causal_step`, :func:`.local.local_cross_step`).

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
def _read_features(numerator, mass, phi, read, feature, feature_mask, columns, column_mask, value_dim,
                   state_feature, state_column, DOT_PRECISION: tl.constexpr):
    """numerator and mass of :func:`cross_read_kernel` with one block of the features phi [beams,
    block] (zero where ``feature_mask`` is off) against the state's rows ``feature``."""
    s = tl.load(read + feature[:, None] * state_feature + columns[None, :] * state_column,
                mask=feature_mask[:, None] & column_mask[None, :], other=0.0)
    z = tl.load(read + feature * state_feature + value_dim * state_column, mask=feature_mask, other=0.0)
    return numerator + tl.dot(phi, s, input_precision=DOT_PRECISION), mass + tl.sum(phi * z[None, :], axis=1)


@triton.jit
def cross_read_kernel(query, weight, offset, state, rows, out,
                      heads, head_dim, value_dim, beams,
                      query_row, query_head,
                      state_row, state_head, state_feature, state_column,
                      weight_head, weight_dim, out_row, out_head,
                      scale, unit_floor, normaliser_floor, PROJECTIONS: tl.constexpr,
                      SINE: tl.constexpr, HAS_ROWS: tl.constexpr, DOT_PRECISION: tl.constexpr,
                      BLOCK_BEAMS: tl.constexpr, BLOCK_DIM: tl.constexpr, BLOCK_FEATURES: tl.constexpr,
                      BLOCK_VALUES: tl.constexpr):
    """Cross RFA's read of a cached source summary by the beams of one source, one head:
    program (source, head).

    query [batch, heads, head_dim] (the q-projection's output, rows ``source x beams + beam``);
    weight and offset as :func:`causal_step_kernel`; state [stored, heads, F, dv + 1] fp32 (any
    strides), read at row ``rows[source]`` (HAS_ROWS: the sources still decoding, gathered on read)
    or ``source``; out [batch, heads, dv]. The products go through ``tl.dot`` at
    ``DOT_PRECISION`` (:data:`.fused.CROSS_DOT_PRECISION`): ``"tf32x3"`` (fp32 operands split into
    two TF32 parts on the tensor cores, three products: about fp32's accuracy) or ``"ieee"`` (fp32
    on the CUDA cores); never plain ``"tf32"``, which would round the features to 10 bits. The loop
    runs over blocks of BLOCK_FEATURES projections: with the fourier map, one block's angles give
    both its sines (features p) and its cosines (features PROJECTIONS + p), each computed once."""
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
    for start in range(0, PROJECTIONS, BLOCK_FEATURES):
        projection = start + tl.arange(0, BLOCK_FEATURES)
        projection_mask = projection < PROJECTIONS
        w = tl.load(weight + head * weight_head + dims[:, None] * weight_dim + projection[None, :],
                    mask=dim_mask[:, None] & projection_mask[None, :], other=0.0)
        angles = tl.dot(units, w, input_precision=DOT_PRECISION)  # [beams, projections]
        if SINE:
            sines = tl.where(projection_mask[None, :], tl.sin(angles) * scale, 0.0)
            numerator, mass = _read_features(numerator, mass, sines, read, projection, projection_mask, columns,
                                             column_mask, value_dim, state_feature, state_column, DOT_PRECISION)
            cosines = tl.where(projection_mask[None, :], tl.cos(angles) * scale, 0.0)
            numerator, mass = _read_features(numerator, mass, cosines, read, PROJECTIONS + projection,
                                             projection_mask, columns, column_mask, value_dim, state_feature,
                                             state_column, DOT_PRECISION)
        else:
            phi = tl.where(projection_mask[None, :], tl.exp(angles + tl.load(offset + head)), 0.0)
            numerator, mass = _read_features(numerator, mass, phi, read, projection, projection_mask, columns,
                                             column_mask, value_dim, state_feature, state_column, DOT_PRECISION)
    result = numerator / tl.maximum(mass, normaliser_floor)[:, None]
    tl.store(out + query_rows[:, None] * out_row + head * out_head + columns[None, :],
             result.to(out.dtype.element_ty), mask=beam_mask[:, None] & column_mask[None, :])


@triton.jit
def _row_block(count, time, BLOCK_ROWS: tl.constexpr):
    """The rows of program ``(block, ·)`` of the training features' kernels, of ``count`` = lead x
    time per head: the rows, which of them exist, and each one's lead index and position in time."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    return rows, rows < count, (rows // time).to(tl.int64), (rows % time).to(tl.int64)


@triton.jit
def fourier_features_kernel(x, weight, features, units, norms,
                            count, time, head_dim,
                            x_lead, x_head, x_row, weight_head, weight_projection,
                            features_lead, features_head, features_row,
                            scale, unit_floor, PROJECTIONS: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                            BLOCK_DIM: tl.constexpr, BLOCK_PROJECTIONS: tl.constexpr):
    """RFA's Fourier features in training, for one block of rows of one head: program (block, head).

    x [lead, heads, time, head_dim] (any strides but the last; ``count`` = lead x time rows per
    head) → features [lead, heads, time, 2D] fp32 (``[sin P, cos P] · scale``, P = x̂ Wᵀ, the
    :func:`.features.random_fourier_features` of the training form), with what the backward needs:
    the unit vectors x̂ [heads, count, head_dim] and the norms |x| [heads, count] (fp32,
    contiguous). weight: W/τ [heads, D, head_dim] fp32 (last dimension contiguous). The products
    are fp32 (``ieee``): an angle's rounding is its sine's."""
    head = tl.program_id(1)
    rows, row_mask, lead, position = _row_block(count, time, BLOCK_ROWS)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    tile = row_mask[:, None] & dim_mask[None, :]
    values = tl.load(x + lead[:, None] * x_lead + head * x_head + position[:, None] * x_row + dims[None, :],
                     mask=tile, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(values * values, axis=1))
    unit = values / tl.maximum(norm, unit_floor)[:, None]
    kept = head.to(tl.int64) * count + rows
    tl.store(units + kept[:, None] * head_dim + dims[None, :], unit, mask=tile)
    tl.store(norms + kept, norm, mask=row_mask)
    written = features + lead * features_lead + head * features_head + position * features_row
    for start in range(0, PROJECTIONS, BLOCK_PROJECTIONS):
        projection = start + tl.arange(0, BLOCK_PROJECTIONS)
        projection_mask = projection < PROJECTIONS
        w = tl.load(weight + head * weight_head + projection[None, :] * weight_projection + dims[:, None],
                    mask=dim_mask[:, None] & projection_mask[None, :], other=0.0)  # [head_dim, projections]
        angles = tl.dot(unit, w, input_precision="ieee")
        out = row_mask[:, None] & projection_mask[None, :]
        tl.store(written[:, None] + projection[None, :], tl.sin(angles) * scale, mask=out)
        tl.store(written[:, None] + PROJECTIONS + projection[None, :], tl.cos(angles) * scale, mask=out)


@triton.jit
def fourier_features_backward_kernel(grad, features, weight, units, norms, angle_grad, grad_x,
                                     count, time, head_dim,
                                     grad_lead, grad_head, grad_row, features_lead, features_head, features_row,
                                     weight_head, weight_projection, unit_floor,
                                     PROJECTIONS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_DIM: tl.constexpr,
                                     BLOCK_PROJECTIONS: tl.constexpr):
    """The backward of :func:`fourier_features_kernel` for one block of rows of one head: program
    (block, head). From the features' gradient ``grad`` [lead, heads, time, 2D] and the features
    themselves, the angles' gradient ``g_sin · s cos P - g_cos · s sin P``, written to angle_grad
    [heads, count, D] (W's gradient is its product with the unit vectors, one batched product
    after this kernel), its product with W, and through the unit vectors
    ``(g - x̂ (x̂·g)) / |x|`` (below the norms' floor ``g / floor``), written to grad_x [heads,
    count, head_dim] fp32 (contiguous)."""
    head = tl.program_id(1)
    rows, row_mask, lead, position = _row_block(count, time, BLOCK_ROWS)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    read_grad = grad + lead * grad_lead + head * grad_head + position * grad_row
    read_features = features + lead * features_lead + head * features_head + position * features_row
    kept = head.to(tl.int64) * count + rows
    unit_grad = tl.zeros([BLOCK_ROWS, BLOCK_DIM], dtype=tl.float32)
    for start in range(0, PROJECTIONS, BLOCK_PROJECTIONS):
        projection = start + tl.arange(0, BLOCK_PROJECTIONS)
        projection_mask = projection < PROJECTIONS
        tile = row_mask[:, None] & projection_mask[None, :]
        sine_grad = tl.load(read_grad[:, None] + projection[None, :], mask=tile, other=0.0).to(tl.float32)
        cosine_grad = tl.load(read_grad[:, None] + PROJECTIONS + projection[None, :], mask=tile,
                              other=0.0).to(tl.float32)
        sine = tl.load(read_features[:, None] + projection[None, :], mask=tile, other=0.0)
        cosine = tl.load(read_features[:, None] + PROJECTIONS + projection[None, :], mask=tile, other=0.0)
        angles_grad = sine_grad * cosine - cosine_grad * sine
        tl.store(angle_grad + kept[:, None] * PROJECTIONS + projection[None, :], angles_grad, mask=tile)
        w = tl.load(weight + head * weight_head + projection[:, None] * weight_projection + dims[None, :],
                    mask=projection_mask[:, None] & dim_mask[None, :], other=0.0)  # [projections, head_dim]
        unit_grad += tl.dot(angles_grad, w, input_precision="ieee")
    tile = row_mask[:, None] & dim_mask[None, :]
    unit = tl.load(units + kept[:, None] * head_dim + dims[None, :], mask=tile, other=0.0)
    norm = tl.load(norms + kept, mask=row_mask, other=1.0)
    along = tl.where(norm < unit_floor, 0.0, tl.sum(unit * unit_grad, axis=1))
    result = (unit_grad - unit * along[:, None]) / tl.maximum(norm, unit_floor)[:, None]
    tl.store(grad_x + kept[:, None] * head_dim + dims[None, :], result, mask=tile)


@triton.jit
def local_causal_step_kernel(qkv, keys_in, values_in, length_in, keys_out, values_out, length_out, rows, starts,
                             real, out, head_dim,
                             qkv_row, qkv_part, qkv_head,
                             in_row, in_head, in_position, written_row, written_head, written_position,
                             length_in_row, length_out_row, starts_row, real_row, out_row, out_head, scale,
                             HAS_CACHE: tl.constexpr, HAS_ROWS: tl.constexpr, HAS_REAL: tl.constexpr,
                             DYNAMIC: tl.constexpr, KEY_SPAN: tl.constexpr, BLOCK_KEYS: tl.constexpr,
                             BLOCK_DIM: tl.constexpr):
    """One token of a causal local head (softmax over the current sentence so far, :mod:`.local`)
    for one (row, head): program (row, local head).

    qkv [batch, 3, local heads, head_dim] (the local heads' part of the in-projection's output);
    the current sentence's keys and values so far, ``keys_in``/``values_in`` [rows, local heads,
    capacity, head_dim] (the same strides), its first ``length_in`` [rows, local heads] positions
    of the row ``rows[row]`` (HAS_ROWS: beam search's reorders, gathered on read) or ``row``; a
    token that starts a sentence (``starts`` [batch]) reads none of them. The keys read are written
    to row ``row`` of ``keys_out``/``values_out`` (HAS_ROWS: the other buffer; else the same one,
    each program reading its own tile before it writes), then this token's key and value after
    them; ``length_out`` counts them (a padding token, ``real`` 0, is written but not counted:
    no later query reads it). The query always sees its own key. Softmax in fp32 in one pass over
    blocks of ``BLOCK_KEYS`` keys (the running maximum and sum of the online softmax, Milakov &
    Gimelshein 2018). The loop runs to the row's own count (``DYNAMIC``: compiled for a GPU) or to
    ``KEY_SPAN``, a constexpr bound on every row's, the masks taking each row's own (Triton 3.6's
    interpreter takes a loop's bound from a constexpr only, see :func:`causal_step_kernel`)."""
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    projected = qkv + row * qkv_row + head * qkv_head
    q = tl.load(projected + dims, mask=dim_mask, other=0.0).to(tl.float32)
    k = tl.load(projected + qkv_part + dims, mask=dim_mask, other=0.0)
    v = tl.load(projected + 2 * qkv_part + dims, mask=dim_mask, other=0.0)
    source = row
    if HAS_ROWS:
        source = tl.load(rows + row).to(tl.int64)
    count = 0
    if HAS_CACHE:
        count = tl.load(length_in + source * length_in_row + head)
    count = tl.where(tl.load(starts + row * starts_row) != 0, 0, count)  # a new sentence: nothing before
    # the token's own key first: the running maximum is finite from the start
    maximum = tl.sum(q * k.to(tl.float32), axis=0) * scale
    total = maximum * 0.0 + 1.0
    accumulated = v.to(tl.float32)
    read_keys = keys_in + source * in_row + head * in_head
    read_values = values_in + source * in_row + head * in_head
    written_keys = keys_out + row * written_row + head * written_head
    written_values = values_out + row * written_row + head * written_head
    end = KEY_SPAN
    if DYNAMIC:
        end = count
    for start in range(0, end, BLOCK_KEYS):
        positions = start + tl.arange(0, BLOCK_KEYS)
        key_mask = positions < count
        tile_mask = key_mask[:, None] & dim_mask[None, :]
        keys = tl.load(read_keys + positions[:, None] * in_position + dims[None, :], mask=tile_mask, other=0.0)
        values = tl.load(read_values + positions[:, None] * in_position + dims[None, :], mask=tile_mask, other=0.0)
        if HAS_ROWS:  # the row this one continues: its sentence's keys move with it
            tl.store(written_keys + positions[:, None] * written_position + dims[None, :], keys, mask=tile_mask)
            tl.store(written_values + positions[:, None] * written_position + dims[None, :], values, mask=tile_mask)
        scores = tl.where(key_mask, tl.sum(q[None, :] * keys.to(tl.float32), axis=1) * scale, float("-inf"))
        new_maximum = tl.maximum(maximum, tl.max(scores, axis=0))
        rescale = tl.exp(maximum - new_maximum)
        weights = tl.exp(scores - new_maximum)
        total = total * rescale + tl.sum(weights, axis=0)
        accumulated = accumulated * rescale + tl.sum(weights[:, None] * values.to(tl.float32), axis=0)
        maximum = new_maximum
    tl.store(out + row * out_row + head * out_head + dims, (accumulated / total).to(out.dtype.element_ty),
             mask=dim_mask)
    tl.store(written_keys + count * written_position + dims, k, mask=dim_mask)
    tl.store(written_values + count * written_position + dims, v, mask=dim_mask)
    kept = count + 1
    if HAS_REAL:
        kept = count + (tl.load(real + row * real_row) != 0).to(tl.int32)
    tl.store(length_out + row * length_out_row + head, kept)


@triton.jit
def local_cross_step_kernel(query, keys, values, first, length, last, rows, order, starts, sentence_in,
                            sentence_out, out, beams, head_dim, query_row, query_head,
                            key_source, key_position, key_head, index_source, index_sentence, last_source,
                            sentence_in_row, sentence_out_row, starts_row, out_row, out_head, scale,
                            HAS_SENTENCE: tl.constexpr, HAS_ROWS: tl.constexpr, HAS_ORDER: tl.constexpr,
                            DYNAMIC: tl.constexpr, KEY_SPAN: tl.constexpr, BLOCK_KEYS: tl.constexpr,
                            BLOCK_DIM: tl.constexpr):
    """One token of a cross local head (softmax over the source sentence aligned with the token's
    target sentence, :mod:`.local`) for one (row, head): program (row, local head).

    query [batch, local heads, head_dim] (the q-projection's output, rows ``source x beams +
    beam``); the source cache of :func:`.local.local_cross_cache`: keys and values [stored, source,
    local heads, head_dim] (the same strides), each sentence's first position and length [stored,
    sentences] and the last sentence [stored], read at source ``rows[source]`` (HAS_ROWS: the
    sources still decoding) or ``source``. The row's target sentence is the one it had
    (``sentence_in`` [rows, local heads] at row ``order[row]``, HAS_ORDER: beam search's reorders
    since the last step, gathered on read; none before the first step), plus one where ``starts``
    [batch]; it is written to ``sentence_out`` at ``row`` (one entry per head, so that no program
    reads what another writes). The aligned sentence is that one, or the source's last. Softmax
    in fp32 in one pass over blocks of its keys, to its length (``DYNAMIC``) or to ``KEY_SPAN``, as
    :func:`local_causal_step_kernel`."""
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    sentence = tl.load(starts + row * starts_row).to(tl.int32)
    if HAS_SENTENCE:
        previous = row
        if HAS_ORDER:
            previous = tl.load(order + row).to(tl.int64)
        sentence += tl.load(sentence_in + previous * sentence_in_row + head)
    tl.store(sentence_out + row * sentence_out_row + head, sentence)
    source = row // beams
    if HAS_ROWS:
        source = tl.load(rows + source).to(tl.int64)
    aligned = tl.maximum(tl.minimum(sentence.to(tl.int64), tl.load(last + source * last_source).to(tl.int64)), 0)
    begin = tl.load(first + source * index_source + aligned * index_sentence)
    count = tl.load(length + source * index_source + aligned * index_sentence)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < head_dim
    q = tl.load(query + row * query_row + head * query_head + dims, mask=dim_mask, other=0.0).to(tl.float32)
    maximum = tl.sum(q, axis=0) * 0.0 - 3.0e38  # finite: no NaN from an empty block
    total = maximum * 0.0
    accumulated = q * 0.0
    read_keys = keys + source * key_source + head * key_head
    read_values = values + source * key_source + head * key_head
    end = KEY_SPAN
    if DYNAMIC:
        end = count
    for start in range(0, end, BLOCK_KEYS):
        offsets = start + tl.arange(0, BLOCK_KEYS)
        key_mask = offsets < count
        tile_mask = key_mask[:, None] & dim_mask[None, :]
        positions = (begin + offsets)[:, None] * key_position + dims[None, :]
        tile = tl.load(read_keys + positions, mask=tile_mask, other=0.0).to(tl.float32)
        scores = tl.where(key_mask, tl.sum(q[None, :] * tile, axis=1) * scale, float("-inf"))
        new_maximum = tl.maximum(maximum, tl.max(scores, axis=0))
        rescale = tl.exp(maximum - new_maximum)
        weights = tl.exp(scores - new_maximum)
        total = total * rescale + tl.sum(weights, axis=0)
        tile = tl.load(read_values + positions, mask=tile_mask, other=0.0).to(tl.float32)
        accumulated = accumulated * rescale + tl.sum(weights[:, None] * tile, axis=0)
        maximum = new_maximum
    result = accumulated / tl.maximum(total, 1e-30)
    tl.store(out + row * out_row + head * out_head + dims, result.to(out.dtype.element_ty), mask=dim_mask)


@triton.jit
def _normalise_tiles(lead_stride, row_stride, time, columns, BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    """Program (block, lead) of the normalisation's kernels: the offsets of its rows' numerator
    tile in a tensor of these strides, the mass column's, and their masks."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < time
    cols = tl.arange(0, BLOCK_COLUMNS)
    base = tl.program_id(1).to(tl.int64) * lead_stride + rows.to(tl.int64) * row_stride
    return base[:, None] + cols[None, :], base + columns, row_mask[:, None] & (cols < columns)[None, :], row_mask


@triton.jit
def normalise_kernel(x, out, time, columns, x_lead, x_row, out_lead, out_row, normaliser_floor,
                     BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    """RFA's floored readout in training (:class:`.state._Normalised`), for a block of rows:
    program (block, lead). x [lead, time, columns + 1] fp32 (the numerator, then the mass φ(q)·z;
    last dimension contiguous) → out [lead, time, columns] = numerator / max(mass, normaliser_floor)."""
    tile, mass_at, tile_mask, row_mask = _normalise_tiles(x_lead, x_row, time, columns, BLOCK_ROWS, BLOCK_COLUMNS)
    numerator = tl.load(x + tile, mask=tile_mask, other=0.0)
    mass = tl.load(x + mass_at, mask=row_mask, other=1.0)
    out_tile, _, _, _ = _normalise_tiles(out_lead, out_row, time, columns, BLOCK_ROWS, BLOCK_COLUMNS)
    tl.store(out + out_tile, numerator / tl.maximum(mass, normaliser_floor)[:, None], mask=tile_mask)


@triton.jit
def normalise_backward_kernel(grad, x, grad_x, time, columns, grad_lead, grad_row, x_lead, x_row,
                              grad_x_lead, grad_x_row, normaliser_floor, BLOCK_ROWS: tl.constexpr,
                              BLOCK_COLUMNS: tl.constexpr):
    """:func:`normalise_kernel`'s backward: grad [lead, time, columns] → grad_x [lead, time,
    columns + 1]: ``g / m`` for the numerator and ``-Σ (g / m) · n / m`` for the mass, with m the
    floored mass (0 where the floor holds it)."""
    tile, mass_at, tile_mask, row_mask = _normalise_tiles(x_lead, x_row, time, columns, BLOCK_ROWS, BLOCK_COLUMNS)
    numerator = tl.load(x + tile, mask=tile_mask, other=0.0)
    mass = tl.load(x + mass_at, mask=row_mask, other=1.0)
    floored = tl.maximum(mass, normaliser_floor)
    grad_tile, _, _, _ = _normalise_tiles(grad_lead, grad_row, time, columns, BLOCK_ROWS, BLOCK_COLUMNS)
    grad_numerator = tl.load(grad + grad_tile, mask=tile_mask, other=0.0) / floored[:, None]
    grad_mass = tl.where(mass < normaliser_floor, 0.0, -tl.sum(grad_numerator * numerator, axis=1) / floored)
    out_tile, out_mass_at, _, _ = _normalise_tiles(grad_x_lead, grad_x_row, time, columns, BLOCK_ROWS, BLOCK_COLUMNS)
    tl.store(grad_x + out_tile, grad_numerator, mask=tile_mask)
    tl.store(grad_x + out_mass_at, grad_mass, mask=row_mask)


@triton.jit
def inverse_tau_kernel(matrix, tau, out, min_tau, SIZE: tl.constexpr, BLOCK: tl.constexpr):
    """A learned temperature's projection in training (:class:`.features._InverseTauScaled`):
    program (block, head). matrix [heads, SIZE] fp32 (each head's W, contiguous), tau [heads] →
    out [heads, SIZE] = W / max(τ, min_tau). (SIZE is a constexpr: a model has two, the causal and
    the cross attention's.)"""
    head = tl.program_id(1)
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = at < SIZE
    floored = tl.maximum(tl.load(tau + head), min_tau)
    tl.store(out + head * SIZE + at, tl.load(matrix + head * SIZE + at, mask=mask, other=0.0) / floored, mask=mask)


@triton.jit
def inverse_tau_backward_kernel(grad, projection, tau, grad_tau, min_tau, SIZE: tl.constexpr, BLOCK: tl.constexpr):
    """τ's gradient of :func:`inverse_tau_kernel`: program (head,), ``-Σ g · (W/τ) / max(τ, min_tau)``
    over the head's SIZE entries, 0 where the floor holds τ (grad, projection [heads, SIZE])."""
    head = tl.program_id(0)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, SIZE, BLOCK):
        at = start + tl.arange(0, BLOCK)
        mask = at < SIZE
        total += tl.load(grad + head * SIZE + at, mask=mask, other=0.0) * \
            tl.load(projection + head * SIZE + at, mask=mask, other=0.0)
    value = tl.load(tau + head)
    floored = tl.maximum(value, min_tau)
    tl.store(grad_tau + head, tl.where(value < min_tau, 0.0, -tl.sum(total, axis=0) / floored))


def compile_kernels(capability: int = 90, warp_size: int = 32) -> dict:
    """Compile the kernels for an NVIDIA GPU of compute ``capability`` (90: H100) with Triton's own
    compiler, down to the GPU's binary (cubin); no GPU or driver is needed. Every constexpr branch
    is compiled on (fourier map, a state read at gathered rows, per-feature forget gates, key
    weights, local keys gathered through beam search's reorders, padding, loops to each row's
    length, bf16 inputs, 3xTF32 products) and off (positive map, empty prefix, nothing before, a
    constexpr loop, fp32 inputs and products). Returns each variant's cubin size in bytes. Not
    possible under the interpreter (``TRITON_INTERPRET=1``): run it without."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", capability, warp_size)
    floats = ("scale", "unit_floor", "normaliser_floor", "min_tau")
    integers = {"rows": "*i64", "order": "*i64", "first": "*i64", "length": "*i64", "last": "*i64",
                "length_in": "*i32", "length_out": "*i32", "sentence_in": "*i32", "sentence_out": "*i32",
                "starts": "*u8", "real": "*u8"}
    # the paper's sizes: 64-wide heads, 64 causal projections (128 features), 256 cross (512) in blocks of 64;
    # local heads over up to 128 keys in blocks of 32
    rfa_sizes = dict(BLOCK_DIM=64, BLOCK_FEATURES=64, BLOCK_VALUES=64)
    local_sizes = dict(BLOCK_DIM=64, BLOCK_KEYS=32)
    variants = {
        "causal, fourier, gathered state, gates, bf16": (causal_step_kernel, dict(
            SINE=True, HAS_STATE=True, HAS_ROWS=True, HAS_FORGET=True, HAS_KEY_WEIGHT=True, PROJECTIONS=64,
            **rfa_sizes), "*bf16"),
        "causal, positive, empty prefix, fp32": (causal_step_kernel, dict(
            SINE=False, HAS_STATE=False, HAS_ROWS=False, HAS_FORGET=False, HAS_KEY_WEIGHT=False, PROJECTIONS=64,
            **rfa_sizes), "*fp32"),
        "cross, fourier, gathered sources, 3xTF32 products, bf16": (cross_read_kernel, dict(
            SINE=True, HAS_ROWS=True, PROJECTIONS=256, DOT_PRECISION="tf32x3", BLOCK_BEAMS=16, **rfa_sizes), "*bf16"),
        "cross, positive, fp32 products, fp32": (cross_read_kernel, dict(
            SINE=False, HAS_ROWS=False, PROJECTIONS=256, DOT_PRECISION="ieee", BLOCK_BEAMS=16, **rfa_sizes),
            "*fp32"),
        "training features, 32 causal projections, bf16 input": (fourier_features_kernel, dict(
            PROJECTIONS=32, BLOCK_ROWS=32, BLOCK_DIM=64, BLOCK_PROJECTIONS=32), "*bf16"),
        "training features' backward, 256 cross projections": (fourier_features_backward_kernel, dict(
            PROJECTIONS=256, BLOCK_ROWS=32, BLOCK_DIM=64, BLOCK_PROJECTIONS=64), "*fp32"),
        "training normalisation": (normalise_kernel, dict(BLOCK_ROWS=32, BLOCK_COLUMNS=64), "*fp32"),
        "training normalisation's backward": (normalise_backward_kernel, dict(BLOCK_ROWS=32, BLOCK_COLUMNS=64),
                                              "*fp32"),
        "training temperature, 256 cross projections": (inverse_tau_kernel, dict(SIZE=256 * 64, BLOCK=1024), "*fp32"),
        "training temperature's backward, 256 cross projections": (inverse_tau_backward_kernel, dict(
            SIZE=256 * 64, BLOCK=1024), "*fp32"),
        "causal local, gathered keys, padding, loop to each row's length, bf16": (local_causal_step_kernel, dict(
            HAS_CACHE=True, HAS_ROWS=True, HAS_REAL=True, DYNAMIC=True, KEY_SPAN=0, **local_sizes), "*bf16"),
        "causal local, nothing before, loop to a constexpr, fp32": (local_causal_step_kernel, dict(
            HAS_CACHE=False, HAS_ROWS=False, HAS_REAL=False, DYNAMIC=False, KEY_SPAN=128, **local_sizes), "*fp32"),
        "cross local, gathered sources and sentences, loop to each row's length, bf16": (
            local_cross_step_kernel, dict(HAS_SENTENCE=True, HAS_ROWS=True, HAS_ORDER=True, DYNAMIC=True,
                                          KEY_SPAN=0, **local_sizes), "*bf16"),
        "cross local, first step, loop to a constexpr, fp32": (local_cross_step_kernel, dict(
            HAS_SENTENCE=False, HAS_ROWS=False, HAS_ORDER=False, DYNAMIC=False, KEY_SPAN=128, **local_sizes),
            "*fp32"),
    }
    sizes = {}
    for name, (kernel, constants, io_type) in variants.items():
        if "FEATURES" in kernel.arg_names:
            constants["FEATURES"] = 2 * constants["PROJECTIONS"] if constants["SINE"] else constants["PROJECTIONS"]
        signature = {}
        for argument in kernel.arg_names:
            if argument in constants:
                signature[argument] = "constexpr"
            elif argument in integers:
                signature[argument] = integers[argument]
            elif argument in ("qkv", "query", "out", "keys", "values", "keys_in", "values_in", "keys_out",
                              "values_out", "x"):
                signature[argument] = io_type
            elif argument in ("weight", "offset", "state", "state_in", "state_out", "forget", "key_weight",
                              "features", "units", "norms", "grad", "angle_grad", "grad_x", "matrix", "tau",
                              "projection", "grad_tau"):
                signature[argument] = "*fp32"
            else:
                signature[argument] = "fp32" if argument in floats else "i32"
        compiled = triton.compile(ASTSource(kernel, signature, constants), target=target,
                                  options={"enable_fp_fusion": True})
        sizes[name] = len(compiled.asm["cubin"])
    return sizes
