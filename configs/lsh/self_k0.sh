# Petrick et al. 2022, Table 2: LSH self-attention, k = 0 context sentences (L = 1).
CONTEXT=0
ATTENTION=self
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
