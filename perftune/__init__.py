"""perftune: a performance-tuning experiment runner for MindSpore training."""

__version__ = "0.1.0"


def load_results(path):
    """A sweep's results as pandas DataFrames (see ``perftune.results.Results``)."""
    from perftune.results import load_results as _load

    return _load(path)
