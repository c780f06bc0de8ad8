# A starting config for your own parallel documents on one GPU (scripts/prepare_text.sh, then
# scripts/train.sh configs/text/gpu_transformer_L4.sh DATA_DIR SAVE_DIR): the concatenation
# transformer over windows of 4 sentences (L = 4) at the size Wu et al. 2022 train (6+6 layers,
# width 512, 8 heads, FFN 1024, tied embeddings) with their training settings: 16,384 target
# tokens per update (4096 x --update-freq 4; on N GPUs use --update-freq 4/N), Adam, peak learning
# rate 1e-3 after 8000 warm-up updates, dropout 0.3, weight decay 1e-4, label smoothing 0.1, mixed
# precision, validation every epoch keeping the checkpoint of the highest validation s-BLEU (beam
# 4) and stopping after 10 validations without a higher one.
# Another family: change MODEL_ARGS as in configs/rfa/*.sh (e.g. --arch rfa_doc_transformer
# --rfa-gate sgate --rfa-cross-proj-dim 256 --rfa-causal-proj-dim 32). docs/training.md says how
# to choose sizes; on a small corpus (under ~100k sentences) start from the CPU config's size.
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch doc_transformer --share-all-embeddings"
# (the JSON holds no space: TRAIN_ARGS is split on spaces)
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --clip-norm 0.0 --lr 1e-3 --lr-scheduler inverse_sqrt
  --warmup-updates 8000 --warmup-init-lr 1e-07 --weight-decay 0.0001 --max-tokens 4096 --update-freq 4
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --fp16 --seed 1 --num-workers 2
  --no-epoch-checkpoints --log-interval 100
  --eval-bleu --eval-bleu-args {\"beam\":4,\"max_len_a\":1.2,\"max_len_b\":10}
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --patience 10"
