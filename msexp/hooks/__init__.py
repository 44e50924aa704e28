"""Sweep the training code you have: report to msexp, and use its techniques, in a few lines.

In a script run by msexp (`experiment: {command: python train.py}`):

    from msexp import hooks
    model.train(epochs, ds, callbacks=[LossMonitor(), hooks.MsexpCallback(model, eval_ds)])

or, in a loop of your own, `hooks.report(epoch, eval_accuracy=acc)` and
`if hooks.should_stop(): break`. Outside msexp they do nothing.
"""

from msexp.hooks.accumulate import AccumulatingTrainStep
from msexp.hooks.callback import MsexpCallback
from msexp.hooks.channel import active, output_dir, params, report, resume_dir, should_stop
from msexp.hooks.resume import resume
from msexp.hooks.techniques import HookedModel, model, optimizer, settings, train_network

__all__ = ["AccumulatingTrainStep", "HookedModel", "MsexpCallback", "active", "model",
           "optimizer", "output_dir", "params", "report", "resume", "resume_dir", "settings",
           "should_stop", "train_network"]
