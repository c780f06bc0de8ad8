"""The package is described in pyproject.toml (name, dependencies, extras); this file only lets
tools that still call setup.py install it the same way."""
from setuptools import setup

setup()
