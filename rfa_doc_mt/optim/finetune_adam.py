"""``finetune_adam``: Adam whose pretrained parameters learn at a fraction of the scheduled
learning rate, for two-stage training (Feng et al. 2022, §4.2: 3e-4 for the new parameters, 6e-5 for
the pretrained ones). The model tags its parameters (``MemoryDocTransformerModel.mark_parameter_groups``)."""

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from fairseq.optim import register_optimizer
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

logger = logging.getLogger(__name__)

PRETRAINED_PARAMETERS = "pretrained"  # the tag (param.param_group) of a two-stage model's pretrained parameters


@dataclass
class FinetuneAdamConfig(FairseqAdamConfig):
    pretrained_lr_scale: float = field(
        default=1.0,
        metadata={"help": "learning rate of the pretrained parameters as a fraction of the scheduled --lr, which "
                          "the new (memory) parameters get; Feng et al. 2022, §4.2: 6e-5 / 3e-4 = 0.2"})


@register_optimizer("finetune_adam", dataclass=FinetuneAdamConfig)
class FinetuneAdam(FairseqAdam):
    """fairseq's Adam (decoupled weight decay, i.e. AdamW) with two parameter groups: those a
    model tagged ``param.param_group = "pretrained"`` learn at ``--pretrained-lr-scale`` times
    the learning rate the scheduler sets; all others (the new parameters) at that rate.

    Parameters carry the tag (``MemoryDocTransformerModel.mark_parameter_groups``); with
    ``--fp16``, pass ``--fp16-no-flatten-grads`` so that they keep it.
    """

    def __init__(self, cfg: FinetuneAdamConfig, params):
        params = list(params)
        pretrained = [p for p in params if getattr(p, "param_group", None) == PRETRAINED_PARAMETERS]
        new = [p for p in params if getattr(p, "param_group", None) != PRETRAINED_PARAMETERS]
        if cfg.pretrained_lr_scale != 1.0 and not pretrained:
            raise ValueError("finetune_adam: no parameter is tagged 'pretrained' (is the model a "
                             "memory_doc_transformer? with --fp16, add --fp16-no-flatten-grads)")
        lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        groups = [{"params": group, "lr_scale": scale, "lr": lr * scale}
                  for group, scale in ((new, 1.0), (pretrained, cfg.pretrained_lr_scale)) if group]
        super().__init__(cfg, groups)
        logger.info(f"finetune_adam: {sum(p.numel() for p in new)} new parameter values at the scheduled lr, "
                    f"{sum(p.numel() for p in pretrained)} pretrained ones at {cfg.pretrained_lr_scale} x lr")

    def get_lr(self):
        group = self.param_groups[0]
        return group["lr"] / group.get("lr_scale", 1.0)

    def set_lr(self, lr):
        for group in self.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
