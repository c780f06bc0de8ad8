from . import doc_transformer  # noqa: F401  (registers the models)
from . import long_short_transformer  # noqa: F401  (long_short_doc_transformer, alias lstm_doc_transformer)
from . import lsh_transformer  # noqa: F401
from . import memory_transformer  # noqa: F401  (memory_doc_transformer)
from . import rfa_transformer  # noqa: F401
