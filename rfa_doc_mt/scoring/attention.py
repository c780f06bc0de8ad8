"""Where a model's cross attention looks: the share of its weight on the current sentence's source.

A window model translates the last sentence of an L-sentence window; to translate it, its
decoder's cross attention has to find that sentence's source tokens among the window's. This
reads, for a trained checkpoint, how much of each cross-attention head's weight the target tokens
of the current (last) sentence put on the current source sentence, with the teacher's target
(the reference prefix), on windows of a prepared split::

    python -m rfa_doc_mt.scoring.attention --path SAVE_DIR/checkpoint_best.pt --data DATA_DIR \\
        [--split valid] [--windows 200] [--json OUT.json]

The weights are the attention's own: softmax(q·k/√d) for fairseq's multi-head attention (the
transformer), and ``φ(q)·φ(k_i) c_i / Σ_j φ(q)·φ(k_j) c_j`` for random feature attention (RFA:
:func:`rfa_doc_mt.modules.random_feature_attention.reference_cross_rfa`'s weights, with the
evaluation matrix decoding uses), whose Fourier features can give a key a negative weight: the
share is signed, and sums to 1 over the source. Printed per decoder layer and head, with what a
head spreading its weight evenly over the window's real tokens would give (``uniform``) and the
updates the checkpoint was trained (``updates``)."""

import argparse
import sys
from typing import Dict, List, Optional

import torch
from torch import Tensor

from ..data.io import DataError
from ..provenance import write_json


def softmax_cross_weights(module, query: Tensor, key: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
    """fairseq ``MultiheadAttention``'s attention weights [batch, heads, target, source], fp32:
    query [target, batch, embed], key [source, batch, kdim]."""
    target, batch, _ = query.shape
    heads, head_dim = module.num_heads, module.head_dim
    q = (module.q_proj(query) * module.scaling).view(target, batch, heads, head_dim).permute(1, 2, 0, 3)
    k = module.k_proj(key).view(key.size(0), batch, heads, head_dim).permute(1, 2, 0, 3)
    logits = (q @ k.transpose(-1, -2)).float()
    if key_padding_mask is not None:
        logits = logits.masked_fill(key_padding_mask.bool()[:, None, None, :], float("-inf"))
    return logits.softmax(-1)


def rfa_cross_weights(module, query: Tensor, key: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
    """Random feature cross attention's weights [batch, heads, target, source], fp32: its RFA heads'
    normalised by their sum (the RFA readout's normaliser, floored as the readout floors it) and,
    where it has local heads (softmax over the aligned source sentence, ``--rfa-cross-local-heads``),
    theirs first. Read while the decoder's hand-off (sentence ids and starts) is in place."""
    from ..modules.random_feature_attention import NORMALISER_FLOOR
    from ..modules.random_feature_attention.local import aligned_ids, local_mask
    from ..modules.sentences import sentence_ids_from_starts

    target, batch, _ = query.shape
    local = module.local_heads
    q = module.q_proj(query).view(target, batch, module.num_heads, module.head_dim).permute(1, 2, 0, 3).float()
    k_all, _ = module._source_heads(key)
    k, _, key_weight = module._rfa_source(k_all, k_all, key, key_padding_mask, module.handed_or_none("sentence_starts"))
    matrix = module.random_matrices.evaluation_matrix
    phi_q, phi_k = module.features_of(q[:, local:], matrix), module.features_of(k.float(), matrix)
    weights = phi_q @ phi_k.transpose(-1, -2)
    if key_weight is not None:
        weights = weights * key_weight.float().unsqueeze(-2)
    weights = weights / weights.sum(-1, keepdim=True).clamp_min(NORMALISER_FLOOR)
    if not local:
        return weights
    target_ids = sentence_ids_from_starts(module.handed("target_sentence_starts", (batch, target), "its local heads"))
    source_ids = module.handed("source_sentence_ids", (batch, key.size(0)), "its local heads")
    visible = local_mask(*aligned_ids(target_ids, source_ids, key_padding_mask), key_padding_mask)
    logits = (q[:, :local] @ k_all[:, :local].float().transpose(-1, -2)) * module.head_dim ** -0.5
    local_weights = logits.masked_fill(~visible, float("-inf")).softmax(-1)
    return torch.cat([local_weights, weights], 1)


def cross_weights(module, query: Tensor, key: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
    """The weights of a decoder layer's cross attention, whichever attention it is."""
    from fairseq.modules import MultiheadAttention

    from ..modules.random_feature_attention import RandomFeatureCrossAttention

    if isinstance(module, RandomFeatureCrossAttention):
        return rfa_cross_weights(module, query, key, key_padding_mask)
    if isinstance(module, MultiheadAttention):
        return softmax_cross_weights(module, query, key, key_padding_mask)
    raise DataError(f"the cross attention {type(module).__name__} is neither softmax nor RFA: its weights are not read")


def current_sentence_masks(src_tokens: Tensor, target: Tensor, separator: int, pad: int):
    """The current sentence (the window's last) on both sides: [batch, source] and [batch, target]
    bool, from the separator tokens (sentence j of the target translates sentence j of the source)."""
    from ..modules.sentences import sentence_ids

    source_ids, target_ids = sentence_ids(src_tokens, separator), sentence_ids(target, separator)
    target_real = target.ne(pad)
    last = target_ids.masked_fill(~target_real, -1).max(1).values  # [batch]
    source = source_ids.eq(last[:, None]) & src_tokens.ne(pad) & src_tokens.ne(separator)
    current_target = target_ids.eq(last[:, None]) & target_real
    return source, current_target


@torch.no_grad()
def current_sentence_share(model, dataset, separator: int, pad: int, windows: int, batch_size: int = 16) -> Dict:
    """Per decoder layer and head: the mean share of cross-attention weight that the current
    sentence's target tokens put on the current source sentence, over the first ``windows`` windows
    of ``dataset`` with more than one sentence (teacher-forced); and the share an even spread over
    each window's real source tokens would give (``uniform``)."""
    chosen = [i for i in range(len(dataset)) if int(dataset[i]["source"].eq(separator).sum()) > 0][:windows]
    if not chosen:
        raise DataError("no window of more than one sentence to read")
    layers = model.decoder.layers
    captured: List[tuple] = []

    def read(index, module, args, kwargs):  # before the call: the decoder's hand-off is in place
        query = kwargs.get("query", args[0] if args else None)
        key = kwargs.get("key", args[1] if len(args) > 1 else None)
        captured.append((index, cross_weights(module, query, key, kwargs.get("key_padding_mask"))))

    hooks = [layer.encoder_attn.register_forward_pre_hook(
        lambda module, args, kwargs, index=index: read(index, module, args, kwargs), with_kwargs=True)
        for index, layer in enumerate(layers)]
    totals = torch.zeros(len(layers), layers[0].encoder_attn.num_heads, dtype=torch.float64)
    uniform, tokens = 0.0, 0
    try:
        for first in range(0, len(chosen), batch_size):
            sample = dataset.collater([dataset[i] for i in chosen[first:first + batch_size]])
            captured.clear()
            model(**sample["net_input"])
            source, current = current_sentence_masks(sample["net_input"]["src_tokens"], sample["target"], separator,
                                                     pad)
            real = sample["net_input"]["src_tokens"].ne(pad)
            for index, weights in captured:  # [batch, heads, target, source]
                share = (weights * source[:, None, None, :]).sum(-1)  # [batch, heads, target]
                totals[index] += (share * current[:, None, :]).sum((0, 2)).double()
            tokens += int(current.sum())
            uniform += float(((source.sum(1) / real.sum(1)).unsqueeze(1) * current).sum())
    finally:
        for hook in hooks:
            hook.remove()
    per_head = (totals / tokens).tolist()
    return {"windows": len(chosen), "target_tokens": tokens, "per_layer_head": per_head,
            "per_layer": [sum(heads) / len(heads) for heads in per_head], "uniform": uniform / tokens}


def load(path: str, data: str):
    """The checkpoint's model (eval mode), its task on ``data``, and the updates it was trained."""
    from fairseq import checkpoint_utils

    from .. import compat  # noqa: F401  (checkpoints load under torch >= 2.6)

    overrides = {"data": data}
    state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides, state=state)
    history = state.get("optimizer_history") or [{}]
    return models[0].eval(), task, history[-1].get("num_updates")


def main(argv=None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--path", required=True, action="append",
                        help="a checkpoint (checkpoint_best.pt); one a run")
    parser.add_argument("--data", required=True, help="the prepared corpus it was trained on")
    parser.add_argument("--split", default="valid", help="the split whose windows are read (default valid)")
    parser.add_argument("--windows", type=int, default=200, help="how many windows (default 200)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be at least 1")
    if len(args.path) > 1:  # not the last one read silently
        parser.error(f"one --path a run, not {len(args.path)}: run it once for each checkpoint")
    args.path = args.path[0]
    torch.set_grad_enabled(False)
    model, task, updates = load(args.path, args.data)
    task.load_dataset(args.split)
    result = current_sentence_share(model, task.datasets[args.split], task.source_separator,
                                    task.source_dictionary.pad(), args.windows)
    result.update(checkpoint=args.path, split=args.split, updates=updates)
    print(f"{args.path} ({updates} updates): cross attention's weight on the current source sentence, from its "
          f"target tokens ({result['windows']} windows of {args.split}, {result['target_tokens']} tokens; uniform "
          f"{result['uniform']:.3f})")
    for layer, heads in enumerate(result["per_layer_head"]):
        print(f"  layer {layer}: mean {result['per_layer'][layer]:.3f}; heads " +
              " ".join(f"{share:.3f}" for share in heads))
    if args.json:
        write_json(result, args.json)
    return result


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
