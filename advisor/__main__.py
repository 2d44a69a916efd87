"""`python -m advisor`: the same command as `advisor`."""

from advisor.cli import run

run()
