"""tiertrain: training beyond device memory. This package binds the collectives (tiertrain.comm)."""

from . import comm

__all__ = ["comm"]
__version__ = "0.1.0"
