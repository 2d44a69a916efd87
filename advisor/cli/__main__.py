"""`python -m advisor.cli`: the same command as `advisor` (the line `advisor schedule` installs)."""

from advisor.cli.entry import run

run()
