# Petrick et al. 2022, Table 2: LSH self- & cross-attention, k = 12 context sentences (L = 13).
CONTEXT=12
ATTENTION=self-cross
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
