"""The sweep file: its format, the search space, and every rule checked before anything runs."""

from msexp.spec.file import Method, Objective
from msexp.spec.load import SweepSpec, load_spec, parse_spec, read_name, trial_params

__all__ = ["Method", "Objective", "SweepSpec", "load_spec", "parse_spec", "read_name",
           "trial_params"]
