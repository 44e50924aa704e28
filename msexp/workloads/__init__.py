"""Built-in workloads. Each module is an msexp experiment: `build(params) -> Workload`."""
