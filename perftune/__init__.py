"""perftune: a performance-tuning experiment runner for MindSpore training."""

__version__ = "0.1.0"


def load_results(path):
    """A sweep's results as pandas DataFrames (see ``perftune.report.frames.Results``)."""
    from perftune.report.frames import load_results as load

    return load(path)
