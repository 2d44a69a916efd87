"""Errors that reach the user as one line and exit status 2."""


class UserError(Exception):
    """Bad input from the user: the message names the problem and the fix.

    The CLI prints it as one line, without a traceback, and exits with status 2.
    """


class ConfigError(UserError):
    """A config file that does not satisfy the contract."""
