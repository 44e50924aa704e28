"""Running on a cluster: local services (PostgreSQL, MLflow server) and schedules."""
