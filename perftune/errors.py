"""One error type for user mistakes; the CLI prints it in one line and exits 2.  Anything else is a bug."""


class UserError(Exception):
    """A mistake in the user's input (plan, files, options): shown without a traceback."""


class ProfileError(UserError):
    """A folder that is not readable profiler output; the message names the file and what was expected."""
