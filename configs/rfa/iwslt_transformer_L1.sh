# Wu et al. 2022, Table 1: the transformer baseline on IWSLT15 zh-en, L = 1.
CORPUS=iwslt
GATE=softmax
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
