# Feng et al. 2022, §4.2, stage 1 of two-stage training: the sentence-level transformer-base baseline
# (6+6 layers, 512, FFN 2048, 8 heads, shared embeddings) that the memory configs of this folder
# finetune (MEMORY_PRETRAINED=<this run>/checkpoint_best.pt). AdamW, learning rate 5e-4 with 4000
# warm-up updates, dropout 0.3 (TED, News; 0.1 for Europarl: BASELINE_DROPOUT=0.1), patience 5.
# Not stated by the paper (this project's choices): 4096 tokens per batch, label smoothing 0.1,
# inverse-sqrt decay, weight decay 1e-4.
TASK_ARGS="--context-size 0"
MODEL_ARGS="--arch doc_transformer --share-all-embeddings --encoder-ffn-embed-dim 2048
  --decoder-ffn-embed-dim 2048 --dropout ${BASELINE_DROPOUT:-0.3}"
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --weight-decay 0.0001 --lr 5e-4
  --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-07 --max-tokens 4096
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --seed 1 --patience 5
  --no-epoch-checkpoints --log-interval 100"
DECODE_ARGS="--beam 5"
