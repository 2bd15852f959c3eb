"""Error types that the CLI maps to exit codes.

``InputError`` (a ``ValueError``) marks a problem with what the user gave us (a bad file,
flag, recipe key or missing data). The CLI prints its message as one line and exits 2.
Anything else escaping a command is a runtime error: one line, exit 1
(``ICML26_DEBUG=1`` shows the traceback).
"""


class InputError(ValueError):
    """Bad user input: exit code 2 with this message on one line."""


class MissingDataError(InputError):
    """A real data set or model that ships in a package is not installed here.

    The message names the install command (e.g. ``make data`` or a pip line)."""
