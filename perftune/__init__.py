"""perftune: a performance-tuning experiment runner for MindSpore training."""

from perftune.version import __version__  # noqa: F401  (the one place it is set)


def load_results(path):
    """A sweep's results as pandas DataFrames (see ``perftune.report.frames.Results``)."""
    from perftune.report.frames import load_results as load

    return load(path)


#: measuring a training job from inside it (``perftune/burst/callback.py``); loaded on first use, so that
#: ``import perftune`` does not import MindSpore
_LAZY = {"Callback": "Callback", "steps": "steps", "loss": "loss", "metric": "metric"}


def __getattr__(name):
    if name in _LAZY:
        from perftune.burst import callback

        return getattr(callback, _LAZY[name])
    raise AttributeError(f"module 'perftune' has no attribute {name!r}")
