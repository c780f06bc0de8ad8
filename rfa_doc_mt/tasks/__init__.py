from . import doc_translation  # noqa: F401  (registers the task)
