# A starting config for your own parallel documents on a CPU (scripts/prepare_text.sh, then
# scripts/train.sh configs/text/cpu_transformer_L4.sh DATA_DIR SAVE_DIR): the concatenation
# transformer over windows of 4 sentences (L = 4), sized for a few cores and a few hours.
#   * size: 3+3 layers of width 256, 4 heads, FFN 1024 (about 10M parameters with a 16k vocabulary:
#     the paper size, configs/text/gpu_transformer_L4.sh, is about 6x the work per token);
#   * batches of 4096 target tokens, Adam, peak learning rate 1e-3 after 1000 warm-up updates,
#     dropout 0.3, label smoothing 0.1 (fairseq's IWSLT recipe, which Wu et al. 2022 follow);
#   * validation every epoch, keeping the checkpoint of the highest validation s-BLEU (beam 4) and
#     stopping after 10 validations without a higher one, as Wu et al. 2022 stop.
# Another family: change MODEL_ARGS as in configs/demo/*_L4.sh (e.g. --arch rfa_doc_transformer
# --rfa-gate sgate). Another L: TASK_ARGS="--context-size L-1". docs/training.md says how to choose.
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch doc_transformer --share-all-embeddings --encoder-layers 3 --decoder-layers 3
  --encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
  --encoder-attention-heads 4 --decoder-attention-heads 4"
# (the JSON holds no space: TRAIN_ARGS is split on spaces)
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 1000
  --warmup-init-lr 1e-07 --weight-decay 0.0001 --max-tokens 4096 --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --seed 1 --num-workers 0 --no-epoch-checkpoints --log-interval 50
  --eval-bleu --eval-bleu-args {\"beam\":4,\"max_len_a\":1.2,\"max_len_b\":10}
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --patience 10"
