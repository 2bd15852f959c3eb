"""icml26: methods of ICML 2026 papers as one command-line toolkit.

Importing this package loads no heavy dependency (no torch)."""

__version__ = "0.1.0"
