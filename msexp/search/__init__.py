"""Choosing trials: the Optuna storage and study, and the ask/tell loop of a sweep."""
