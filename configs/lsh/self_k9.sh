# Petrick et al. 2022, Table 2: LSH self-attention, k = 9 context sentences (L = 10).
CONTEXT=9
ATTENTION=self
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
