"""``python -m rfa_doc_mt.bench.update_cost``: the former name of ``python -m
rfa_doc_mt.reproduce.cost`` (what the embedded reproduction costs on this machine; that module
says how it is measured). The estimate needs the reproduction's list of systems, so it lives in
:mod:`rfa_doc_mt.reproduce`, which uses the benchmarks' timing step; this entry point only runs
that command, and no other module of :mod:`rfa_doc_mt.bench` imports :mod:`rfa_doc_mt.reproduce`.
"""

import sys

if __name__ == "__main__":
    from rfa_doc_mt.reproduce.cost import main

    sys.exit(main())
