"""The version of the edgebyoc distribution (kept in one place, read by the package and the
artifact manifests)."""

__version__ = "2.10.0"
