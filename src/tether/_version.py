"""The one place Tether's version lives; read by ``--version`` without importing anything else."""

__version__ = "0.1.0"
