# Petrick et al. 2022, Table 2: LSH self-attention, k = 12 context sentences (L = 13).
CONTEXT=12
ATTENTION=self
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
