"""Recording trials: MLflow parent and child runs, the spool, and the study report."""
