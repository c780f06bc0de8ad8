# Training settings shared by the demo configs (tiny models, the synthetic corpus, 2-core CPU).
# The configs source this file from the project (RFA_DOC_MT_ROOT, which scripts/common.sh sets),
# so that a config copied elsewhere to be edited still finds it; sourced on their own, from
# their own folder.
DEMO_TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --lr 2e-3 --lr-scheduler inverse_sqrt
  --warmup-updates 200 --max-tokens 4096 --max-update ${DEMO_MAX_UPDATE:-600}
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --seed 1
  --num-workers 0 --no-epoch-checkpoints --log-interval 100"
