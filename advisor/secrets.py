"""Passwords in addresses: `${NAME}` read from the environment, and never shown.

A storage or tracking URL may carry a password (postgresql://user:password@host/db). advisor
shows such a URL only through `shown`, in progress lines, errors, logs, MLflow and the results
folder alike. Better still, keep passwords out of the config: libpq reads `PGPASSWORD` and
`~/.pgpass`, MLflow reads `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`, and a URL
may name an environment variable as `${NAME}`.
"""

from __future__ import annotations

import os
import re

PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):(?P<password>[^/\s]*)@")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
HIDDEN = "***"


def shown(text: str) -> str:
    """The text with the password of every URL in it replaced by ***."""
    return PASSWORD.sub(lambda match: f"{match['head']}:{HIDDEN}@", text)


def unset_variables(text: str) -> list[str]:
    """The `${NAME}` references in the text whose variable the environment lacks."""
    return [name for name in VARIABLE.findall(text) if name not in os.environ]


def expanded(text: str) -> str:
    """The text with each `${NAME}` replaced by that environment variable (`unset_variables` first)."""
    return VARIABLE.sub(lambda match: os.environ[match[1]], text)
