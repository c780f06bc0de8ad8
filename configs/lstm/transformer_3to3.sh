# The 3-to-3 transformer baseline of Zhang et al. 2020 (Sys1 of the supplement's Table 1): windows of
# three sentences, every head global (--local-heads 0: the long-short model with no local head is
# the concatenation transformer). Same sizes and training as lstm_3to3.sh.
TASK_ARGS="--context-size 2"
MODEL_ARGS="--arch long_short_doc_transformer --share-all-embeddings --local-heads 0 --local-attention encoder,decoder"
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --clip-norm 0.0 --lr 5e-4 --lr-scheduler inverse_sqrt
  --warmup-updates 8000 --warmup-init-lr 1e-07 --weight-decay 0.0001 --max-tokens 4096 --update-freq 4
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --fp16 --seed 1
  --patience 10 --no-epoch-checkpoints"
