# Feng et al. 2022 (Feng et al., "Learn To Remember: Transformer with Recurrent Memory for Document-Level
# Machine Translation") §4.2, stage 2 of two-stage training: the recurrent-memory transformer,
# finetuned from a sentence-level baseline (configs/memory/baseline.sh, stage 1).
# Sourced by the configs in this folder after they set
#   ENCODER_MEMORY_LAYERS, DECODER_MEMORY_LAYERS   layers with a memory (0 = bottom, 5 = top;
#                                                  comma-separated; 'none' for no memory on that side)
# and, for training, the environment variable
#   MEMORY_PRETRAINED   the stage-1 checkpoint (or pass --finetune-from-model PATH to scripts/train.sh)
#
# Paper settings: transformer-base (6+6 layers, 512, FFN 2048, 8 heads, shared embeddings), 16
# memory slots, learning rate 3e-4 for the new (memory) parameters and 6e-5 for the pretrained
# ones (finetune_adam: --lr 3e-4 --pretrained-lr-scale 0.2), 1000 warm-up updates (TED; 2000 for
# News and Europarl), dropout 0.2 (TED, News; 0.1 for Europarl: MEMORY_DROPOUT=0.1), AdamW,
# patience 5, beam 5. One sentence per row (--context-size 0), documents read in order.
# Not stated by the paper (this project's choices): tokens per sentence step (2048), the
# optimisation window (5 to 10 sentence positions per update, drawn per update; §5.3 found larger
# windows converge faster and more stably), label smoothing 0.1, inverse-sqrt decay, weight decay
# 1e-4. Each sentence runs twice in training (for its loss, and recomputed as the context of the
# next sentence: generation/memory_decoding.py), so a step costs about two sentence-level steps.
: "${ENCODER_MEMORY_LAYERS:?set ENCODER_MEMORY_LAYERS before sourcing configs/memory/common.sh}"
: "${DECODER_MEMORY_LAYERS:?set DECODER_MEMORY_LAYERS before sourcing configs/memory/common.sh}"

TASK_ARGS="--context-size 0 --recurrent-memory --optimization-window ${MEMORY_OPTIMIZATION_WINDOW:-5-10}"
MODEL_ARGS="--arch memory_doc_transformer --share-all-embeddings --memory-slots 16
  --encoder-memory-layers $ENCODER_MEMORY_LAYERS --decoder-memory-layers $DECODER_MEMORY_LAYERS
  --dropout ${MEMORY_DROPOUT:-0.2}"
# --ddp-backend legacy_ddp: with several workers, one all-reduce per update (tasks/doc_translation.py)
TRAIN_ARGS="--optimizer finetune_adam --adam-betas (0.9,0.98) --weight-decay 0.0001 --lr 3e-4
  --pretrained-lr-scale 0.2 --lr-scheduler inverse_sqrt --warmup-updates ${MEMORY_WARMUP:-1000}
  --warmup-init-lr 1e-07 --max-tokens 2048 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --seed 1 --patience 5 --no-epoch-checkpoints --log-interval 100 --ddp-backend legacy_ddp
  ${MEMORY_PRETRAINED:+--finetune-from-model $MEMORY_PRETRAINED}"
DECODE_ARGS="--beam 5"
