"""The one way a model hands its attention modules what a forward needs besides their inputs.

fairseq's layer loop passes an attention module hidden states, never token ids or document
state, so each family's model computes the extra information once per forward and hands it in
before the forward: RFA's sentence starts (target, and source for the cross gate), long-short
masking's sentence ids (queries, keys, and the aligned source sentences), the recurrent memory
(the memory ``M^t`` a sentence reads).

What was handed in stays valid until the next hand-in: activation checkpointing
(``--checkpoint-activations``) reruns a layer's forward during the backward pass, and the
rerun must see what the forward saw. (The memory layers are never checkpointed, so the memory
model drops its references after each step, see ``recurrent_memory.py``.)
"""

from typing import Any, Dict, Optional


class HandOff:
    """Mixin for a module that reads per-forward information: its model calls
    :meth:`hand_in` before each forward, the module reads with :meth:`handed`."""

    _handed: Dict[str, Any]

    def hand_in(self, **values: Optional[Any]) -> None:
        """What the next forward (and its recomputation) reads; replaces everything handed before.
        ``hand_in()`` with nothing drops the references."""
        # object.__setattr__: a plain dict attribute, never registered as a submodule or buffer
        object.__setattr__(self, "_handed", dict(values))

    def handed(self, name: str, shape=None, needed_for: str = "") -> Any:
        """The value handed in as ``name``; a clear error when it is missing or (``shape`` given)
        has another shape than the forward expects."""
        value = self.handed_or_none(name)
        if value is None:
            reason = f" for {needed_for}" if needed_for else ""
            raise RuntimeError(f"{type(self).__name__} needs {name}{reason}, handed in by its model before each "
                               f"forward (hand_in); build it inside the model family it belongs to")
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise RuntimeError(f"{type(self).__name__}: {name} of shape {tuple(value.shape)}, this forward needs "
                               f"{tuple(shape)}")
        return value

    def handed_or_none(self, name: str) -> Optional[Any]:
        return getattr(self, "_handed", {}).get(name)
