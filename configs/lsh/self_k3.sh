# Petrick et al. 2022, Table 2: LSH self-attention, k = 3 context sentences (L = 4).
CONTEXT=3
ATTENTION=self
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
