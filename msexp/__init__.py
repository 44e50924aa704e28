"""msexp: sweep MindSpore training techniques and compare the trials in MLflow."""

__version__ = "0.1.0"

import os as _os

# MLflow's usage telemetry calls out to the internet from every process and holds exit
# for up to a second; trials and clusters here are often offline. Opt back in by
# setting MLFLOW_DISABLE_TELEMETRY=false.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
