"""Running trials: the trial protocol, trial processes, the worker pool and msrun trials."""
