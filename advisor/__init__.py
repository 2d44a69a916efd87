"""advisor: measures a PyTorch or pandas job, names its bottleneck, and verifies the fixes."""

__version__ = "0.1.0"
