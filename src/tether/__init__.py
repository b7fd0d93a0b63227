"""Tether: a warm, owned, honest runtime and CLI for ACP coding agents."""

from tether._version import __version__

__all__ = ["__version__"]
