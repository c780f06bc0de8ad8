# Petrick et al. 2022, Table 2: LSH self- & cross-attention, k = 3 context sentences (L = 4).
CONTEXT=3
ATTENTION=self-cross
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
