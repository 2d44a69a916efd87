"""Errors that reach the user as one line and exit status 2."""

from advisor.secrets import shown


class UserError(Exception):
    """Bad input from the user: the message names the problem and the fix.

    The CLI prints it as one line, without a traceback, and exits with status 2. A URL's
    password in the message (a driver's own words may quote the URL) is hidden as it is made,
    for the Python API's callers as for the CLI's.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(shown(arg) if isinstance(arg, str) else arg for arg in args))


class ConfigError(UserError):
    """A config file that does not satisfy the contract."""


class WorkloadInvalid(UserError):
    """The user's workload breaks its contract (reported by a measurement child or rank)."""
