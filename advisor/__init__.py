"""advisor: measures a PyTorch or pandas job, names its bottleneck, and verifies the fixes.

    import advisor
    found = advisor.diagnose("configs/quickstart.yaml")      # or a dict shaped like the YAML
    done = advisor.optimize("configs/quickstart.yaml")
    for rec in done.recommendations: print(rec.rank, rec.recipes, rec.speedup, rec.verified)
"""

__version__ = "0.1.0"


def diagnose(config, progress=None, root=None):
    """Measures the baseline and names its bottlenecks; see `advisor.api.diagnose`."""
    from advisor.api import diagnose as run

    return run(config, progress, root=root)


def optimize(config, progress=None, results=None, fresh=False, root=None):
    """Diagnoses, trials, verifies, ranks and logs to MLflow; see `advisor.api.optimize`."""
    from advisor.api import optimize as run

    return run(config, progress, results=results, fresh=fresh, root=root)
