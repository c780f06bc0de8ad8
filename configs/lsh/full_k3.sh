# Petrick et al. 2022, Table 2: full attention (baseline), k = 3 context sentences (L = 4).
CONTEXT=3
ATTENTION=full
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
