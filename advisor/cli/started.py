"""When the user's command started, read before anything heavy is imported."""

import time

COMMAND_STARTED = time.time()  # the user's clock: before torch, MLflow and Optuna are imported; a first fix counts from here
