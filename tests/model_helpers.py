"""Helpers shared by the model tests: build a registered model from command-line options."""

import argparse

import torch


def build_model(model_class, architecture, task, *model_args, seed=1):
    """``model_class`` with ``architecture``'s defaults and ``model_args``, in eval mode."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    model_class.add_args(parser)
    args = parser.parse_args(list(model_args))
    architecture(args)
    torch.manual_seed(seed)
    return model_class.build_model(args, task).eval()


def max_difference(a, b):
    return (a.float() - b.float()).abs().max().item()
