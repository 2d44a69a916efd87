"""`python -m advisor`: the same command as `advisor`."""

from advisor.cli import run

if __name__ == "__main__":
    run()
