"""Where cross attention looks (rfa_doc_mt.scoring.attention): the weights read are the attentions'
own (they reproduce each module's output), the current sentence is found on both sides from the
separators, and the shares are averaged over the current sentence's target tokens."""

import pytest
import torch
from conftest import assert_fp32_close, build_model

from rfa_doc_mt.models.build import dictionary_task, toy_dictionary
from rfa_doc_mt.scoring import attention

pytestmark = pytest.mark.usefixtures("one_thread")
WORDS = 20


def model_and_inputs(arch, seed=0, options=()):
    dictionary, separator = toy_dictionary(WORDS)
    model = build_model(arch, dictionary_task(dictionary, separator), *options, seed=1)
    generator = torch.Generator().manual_seed(seed)
    source, batch = 9, 3
    query = torch.randn(5, batch, model.decoder.embed_dim, generator=generator)
    key = torch.randn(source, batch, model.encoder.embed_tokens.embedding_dim, generator=generator)
    padding = torch.zeros(batch, source, dtype=torch.bool)
    padding[1, 6:] = True
    return model.decoder.layers[0].encoder_attn, query, key, padding


def test_softmax_weights_are_fairseqs_own():
    module, query, key, padding = model_and_inputs("doc_transformer_tiny")
    with torch.no_grad():
        # static_kv, as the decoder calls its cross attention (fairseq then computes the weights itself)
        _, expected = module(query, key, key, key_padding_mask=padding, static_kv=True, need_weights=True,
                             need_head_weights=True)
        weights = attention.cross_weights(module, query, key, padding)
    assert weights.shape == (3, module.num_heads, 5, 9)
    assert_fp32_close(weights, expected.transpose(0, 1), terms=module.head_dim + 9, magnitude=1.0)
    assert weights[1, :, :, 6:].abs().max() == 0  # padding gets nothing


@pytest.mark.parametrize("local_heads", [0, 2])
def test_rfa_weights_reproduce_the_modules_output(local_heads):
    """Σ_i w_ti v_i through the output projection is what the RFA cross module computes (eval mode:
    the evaluation matrix), with local softmax heads over the aligned source sentence too."""
    from rfa_doc_mt.modules.sentences import sentence_ids, sentence_starts

    options = ("--rfa-cross-local-heads", str(local_heads)) if local_heads else ()
    module, query, key, padding = model_and_inputs("rfa_doc_transformer_tiny", options=options)
    sep = 3
    source_tokens = torch.tensor([[5, 6, sep, 7, 8, 9, sep, 10, 11]] * 3)  # three sentences of source
    target_tokens = torch.tensor([[5, sep, 6, 7, sep]] * 3)  # two sentences so far, a third starting
    module.hand_in(target_sentence_starts=sentence_starts(target_tokens, sep),
                   source_sentence_ids=sentence_ids(source_tokens, sep))
    with torch.no_grad():
        expected, _ = module(query, key, key, key_padding_mask=padding)
        weights = attention.cross_weights(module, query, key, padding)
        _, v = module._source_heads(key)
        read = (weights @ v.float()).permute(2, 0, 1, 3).reshape(5, 3, module.embed_dim)
        out = module.out_proj(read)
    module.hand_in()
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)
    assert weights[1, :, :, 6:].abs().max() == 0
    if local_heads:  # target sentence j reads source sentence j: tokens 3-5 from its third target token on
        assert weights[0, :local_heads, 3, :3].abs().max() == 0 and weights[0, :local_heads, 3, 7:].abs().max() == 0
    assert_fp32_close(out, expected, terms=2 * module.embed_dim + module.features + 9, magnitude=1.0)


def test_the_current_sentence_is_the_last_on_both_sides():
    sep, pad = 3, 1
    source = torch.tensor([[10, 11, sep, 12, 13, 2], [20, sep, 21, sep, 22, 2]])
    target = torch.tensor([[30, sep, 31, 32, 2, pad], [40, sep, 41, sep, 42, 2]])
    current_source, current_target = attention.current_sentence_masks(source, target, sep, pad)
    assert current_source.tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]]
    assert current_target.tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1]]


class Windows:
    """Two-sentence windows of a toy vocabulary, as the task's dataset gives them."""

    def __init__(self, separator, count=6):
        generator = torch.Generator().manual_seed(3)
        self.items = []
        for index in range(count):
            first, second = (torch.randint(4, 4 + WORDS, (n,), generator=generator) for n in (3 + index % 2, 4))
            source = torch.cat([first, torch.tensor([separator]), second, torch.tensor([2])])
            self.items.append({"id": index, "source": source, "target": source.flip(0).roll(-1)})
        one_sentence = {"id": count, "source": torch.tensor([5, 6, 2]), "target": torch.tensor([7, 2])}
        self.items.append(one_sentence)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def collater(self, samples):
        from fairseq.data import data_utils

        source = data_utils.collate_tokens([s["source"] for s in samples], 1)
        target = data_utils.collate_tokens([s["target"] for s in samples], 1)
        previous = data_utils.collate_tokens([s["target"] for s in samples], 1, 2, move_eos_to_beginning=True)
        return {"net_input": {"src_tokens": source, "src_lengths": source.ne(1).sum(1), "prev_output_tokens": previous},
                "target": target}


def test_shares_are_averaged_over_the_current_sentences_target_tokens(monkeypatch):
    dictionary, separator = toy_dictionary(WORDS)
    model = build_model("doc_transformer_tiny", dictionary_task(dictionary, separator), seed=1)
    windows = Windows(separator)
    real = model.decoder.layers[0].encoder_attn.num_heads
    result = attention.current_sentence_share(model, windows, separator, 1, windows=10, batch_size=4)
    assert result["windows"] == 6  # the one-sentence window is left out
    assert len(result["per_layer_head"]) == len(model.decoder.layers) and len(result["per_layer_head"][0]) == real
    assert all(0 < share < 1 for heads in result["per_layer_head"] for share in heads)

    def even(module, query, key, key_padding_mask):  # an even spread over the real tokens
        weights = (~key_padding_mask).float()[:, None, None, :].expand(-1, module.num_heads, query.size(0), -1)
        return weights / weights.sum(-1, keepdim=True)

    monkeypatch.setattr(attention, "cross_weights", even)
    spread = attention.current_sentence_share(model, windows, separator, 1, windows=10, batch_size=4)
    # fp32 shares summed over 27 tokens: within 27 roundings of 2^-24 (relative)
    assert spread["per_layer"] == pytest.approx([spread["uniform"]] * len(model.decoder.layers), rel=27 * 2 ** -24)
    # sources of 3 (or 4) words, the separator, 4 words and the end of sentence: the current sentence
    # is 5 of 9 (or 10) tokens; the target (the source reversed) ends in the 3 (or 4) words and its
    # end: 4 (or 5) current target tokens, each with that share
    assert spread["uniform"] == pytest.approx((3 * 4 * 5 / 9 + 3 * 5 * 5 / 10) / (3 * 4 + 3 * 5))
    assert spread["target_tokens"] == 3 * 4 + 3 * 5


def test_local_cross_heads_read_the_source_sentence_of_the_token_each_query_predicts():
    """Teacher-forced, every query of the current target sentence puts all of a local head's weight
    on the current source sentence: its first query too, whose input is the separator closing the
    sentence before (it predicts the current sentence's first token). The RFA heads spread theirs."""
    dictionary, separator = toy_dictionary(WORDS)
    model = build_model("rfa_doc_transformer_tiny", dictionary_task(dictionary, separator),
                        "--rfa-cross-local-heads", "2", seed=1)
    result = attention.current_sentence_share(model, Windows(separator), separator, 1, windows=10, batch_size=4)
    for heads in result["per_layer_head"]:
        # a softmax over at most 10 keys, the masked ones exactly 0: its sum is 1 within 10 fp32 roundings
        assert heads[:2] == pytest.approx([1.0, 1.0], abs=10 * 2 ** -24)
        assert all(share < 0.99 for share in heads[2:])


def test_a_second_checkpoint_is_refused_not_ignored(capsys):
    with pytest.raises(SystemExit):
        attention.main(["--path", "first.pt", "--path", "second.pt", "--data", "data"])
    assert "one --path a run, not 2" in capsys.readouterr().err
