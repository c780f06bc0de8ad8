# Recurrent-memory transformer (Feng et al. 2022), tiny, for `make demo`: stage 2 of two-stage training,
# finetuned from the sentence-level demo model (stage 1: configs/demo/transformer_L1.sh, same
# sizes) found at MEMORY_PRETRAINED (default: the demo's transformer_L1 run). A 16-slot memory in
# the top encoder and the top decoder layer; one sentence per row, documents read in order
# (--recurrent-memory); new parameters learn at the demo's 2e-3, pretrained ones at 0.2 x that.
# Optimisation windows of 5-10 sentence positions, as configs/memory/common.sh (Feng et al. 2022, §5.3:
# larger windows converge faster and more stably); 1400 tokens a sentence step, so that an update
# (a window of sentence steps) holds about as many tokens as the other demo systems' 4096.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
MEMORY_PRETRAINED=${MEMORY_PRETRAINED:-${DEMO_DIR:-$ROOT/work/demo}/transformer_L1/checkpoint_best.pt}
TASK_ARGS="--context-size 0 --recurrent-memory --optimization-window 5-10"
# memory layers (Feng et al. 2022, Table 3): the top one (-1) of the two on each side unless a config sets them
MODEL_ARGS="--arch memory_doc_transformer_tiny --share-all-embeddings
  --encoder-memory-layers ${MEMORY_ENCODER_LAYERS:--1} --decoder-memory-layers ${MEMORY_DECODER_LAYERS:--1}"
# --ddp-backend legacy_ddp: with several workers, one all-reduce per update (tasks/doc_translation.py)
TRAIN_ARGS="--optimizer finetune_adam --adam-betas (0.9,0.98) --lr 2e-3 --pretrained-lr-scale 0.2
  --lr-scheduler inverse_sqrt --warmup-updates 100 --max-tokens 1400 --max-update ${DEMO_MEMORY_MAX_UPDATE:-300}
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --seed 1
  --num-workers 0 --no-epoch-checkpoints --log-interval 50 --finetune-from-model $MEMORY_PRETRAINED
  --ddp-backend legacy_ddp"
