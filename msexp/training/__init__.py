"""The training techniques msexp sweeps, written with MindSpore ops.

Import only inside a trial process: these modules import MindSpore.
"""
