"""msexp: sweep MindSpore training techniques and compare the trials in MLflow."""

__version__ = "0.1.0"
