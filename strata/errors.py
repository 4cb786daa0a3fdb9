"""The one exception type the CLI turns into a one-line message."""


class StrataError(Exception):
    """An error a user can act on; its message is one line that says what went wrong."""
