# Petrick et al. 2022, Table 2: full attention (baseline), k = 9 context sentences (L = 10).
CONTEXT=9
ATTENTION=full
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
