"""torchrun, ended the moment it returns: `python -m advisor.harness.torchrun` takes torchrun's
arguments. A plain torchrun then tears its imported modules down (torch's among them), about
0.5 s a run after its ranks have ended, while advisor waits on it."""


def run() -> int:
    """torchrun's main on this process's arguments; its exit status."""
    from torch.distributed.run import main

    try:
        main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0


if __name__ == "__main__":
    from advisor.harness.lifetime import exit_now

    exit_now(run())
