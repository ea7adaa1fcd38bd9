"""The stream-stream join operator (``join``); see ``_probe.py`` for how a micro-batch runs."""

from ._builder import join

__all__ = ["join"]
