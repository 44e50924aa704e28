"""Model.train with LossMonitor and TimeMonitor, then Model.eval of the validation set
with a TimeMonitor of its own (`Eval epoch time: ...`), as MindSpore's tutorials write
it; the args printed first as `name = value`, the result logged by mindcv's `set_logger`
(--color: its default, rich's `RichHandler`, which colours numbers where FORCE_COLOR is
set; else its plain formatter). It wrote tests/assets/logs/eval_timing*.log."""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindcv.utils.logger import set_logger
from mindspore import nn
from mindspore.train import Accuracy, LossMonitor, Model, TimeMonitor
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--color", action="store_true")
args = parser.parse_args()
for name, value in vars(args).items():
    print(f"{name} = {value}")

ms.set_seed(0)
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32).reshape(-1, 64)
labels = digits.target.astype(np.int32)
train_ds = ds.NumpySlicesDataset({"image": images[:1400], "label": labels[:1400]},
                                 shuffle=True).batch(50, drop_remainder=True)
eval_ds = ds.NumpySlicesDataset({"image": images[1400:], "label": labels[1400:]},
                                shuffle=False).batch(50)
net = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
model = Model(net, loss, nn.Momentum(net.trainable_params(), args.lr, 0.9),
              metrics={"Accuracy": Accuracy()})
model.train(args.epochs, train_ds, callbacks=[LossMonitor(14), TimeMonitor()],
            dataset_sink_mode=False)
log = set_logger("eval_timing", color=args.color)
log.info("eval: %s", model.eval(eval_ds, callbacks=[TimeMonitor()], dataset_sink_mode=False))
