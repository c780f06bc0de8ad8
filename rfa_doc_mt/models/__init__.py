from . import doc_transformer  # noqa: F401  (registers the models)
from . import lstm_transformer  # noqa: F401
from . import lsh_transformer  # noqa: F401
from . import memory_transformer  # noqa: F401  (memory_doc_transformer)
from . import rfa_transformer  # noqa: F401
