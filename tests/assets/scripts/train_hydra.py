"""A script configured the Hydra way: `key=value` overrides, dotted keys for groups."""

import sys

config = {"lr": 0.1, "optim.momentum": 0.5, "epochs": 1}
for override in sys.argv[1:]:
    key, _, value = override.partition("=")
    if key not in config:
        sys.exit(f"unknown override {key}")
    config[key] = type(config[key])(value)
score = 1.0 - abs(config["lr"] - 0.3) - abs(config["optim.momentum"] - 0.9)
print(f"score={score:.6f}")
