"""perftune's version, in a module of its own: imported by the burst and the report without importing the package's
lazy names (``perftune/__init__.py``)."""

__version__ = "0.1.0"
