# Long-short term masking transformer (Zhang et al. 2020), 3-to-3 (L = 3): windows of three sentences,
# the setting of the paper's examples (supplement, Table 1).
# Paper sizes (as doc_transformer: 6+6 layers, 512, 8 heads, FFN 1024, tied embeddings); 4 of
# the 8 heads of encoder and decoder self-attention are local (see only their own sentence).
# Training as Wu et al. 2022 trains every model family: Adam, peak lr 5e-4 warmed up over 8000
# updates, 16,384 tokens per update (4096 x 4), mixed precision (needs a GPU); decoding beam 4
# (scripts/decode.sh). Stopping (not given by the papers): 10 epochs without a better valid loss.
TASK_ARGS="--context-size 2"
MODEL_ARGS="--arch long_short_doc_transformer --share-all-embeddings --local-heads 4 --local-attention encoder,decoder"
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --clip-norm 0.0 --lr 5e-4 --lr-scheduler inverse_sqrt
  --warmup-updates 8000 --warmup-init-lr 1e-07 --weight-decay 0.0001 --max-tokens 4096 --update-freq 4
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --fp16 --seed 1
  --patience 10 --no-epoch-checkpoints"
