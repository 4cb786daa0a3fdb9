"""The exceptions the CLI turns into a one-line message (pure: the fold raises them too)."""


class StrataError(Exception):
    """An error a user can act on; its message is one line that says what went wrong."""


class GapError(StrataError):
    """A record arrived at an offset that is not the fold's version: the log skips or repeats one,
    and a snapshot's version would no longer be its offset + 1."""


class MissingTopicError(StrataError):
    """A topic of the deployment is not on the broker (`strata topics create` makes them): a
    client would otherwise wait for it, as for a topic still being created, and fail late."""
