# RFA with Peng et al.'s (2021 §3.3) gate at every token (RFA-token: one gate per head from the
# token's own input, S_t = g_t S_{t-1} + (1 - g_t) φ(k_t) v_tᵀ, b_g initialised to 0 as RFA's) over
# 4-sentence windows (L = 4), tiny, beside configs/demo/rfa_sgate_L4.sh.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate token --rfa-gate-bias-init 0"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
