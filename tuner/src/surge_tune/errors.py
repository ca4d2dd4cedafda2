"""One exception type for every error a user can cause (bad path, bad file, unknown app).

The CLI prints these as one clear line and exits nonzero; anything else is a bug and keeps its traceback.
"""


class TuneError(Exception):
    """A user-facing error: the message says what is wrong and with which input."""
