"""DL: a deep-learning language with shapes in its types and `grad` as a source transform."""

__version__ = "0.1.0"
