"""Importing this package registers every model family with fairseq."""
# ruff: noqa: I001  (one line per family, each with the names it registers)

from . import doc_transformer  # noqa: F401  (doc_transformer)
from . import long_short_transformer  # noqa: F401  (long_short_doc_transformer; alias lstm_doc_transformer)
from . import lsh_transformer  # noqa: F401  (lsh_doc_transformer)
from . import memory_transformer  # noqa: F401  (memory_doc_transformer)
from . import rfa_transformer  # noqa: F401  (rfa_doc_transformer)
