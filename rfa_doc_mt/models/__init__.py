from . import doc_transformer  # noqa: F401  (registers the models)
