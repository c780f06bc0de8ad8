# RFA with GLA's decay per feature (Yang et al. 2024; RFA-feature: α_t = σ(x_t W_1 W_2 + b)^{1/τ},
# S_t = Diag(α_t) S_{t-1} + φ(k_t) v_tᵀ, rank 16, τ = 16, b initialised to 0 as GLA's) over
# 4-sentence windows (L = 4), tiny, beside configs/demo/rfa_sgate_L4.sh.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate feature --rfa-gate-rank 16 --rfa-gate-temperature 16 --rfa-gate-bias-init 0"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
