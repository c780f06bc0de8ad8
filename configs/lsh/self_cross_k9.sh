# Petrick et al. 2022, Table 2: LSH self- & cross-attention, k = 9 context sentences (L = 10).
CONTEXT=9
ATTENTION=self-cross
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
