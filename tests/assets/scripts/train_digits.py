"""A LeNet-style network on scikit-learn's digits, trained the way the MindSpore tutorials
write it: argparse, a mindspore.dataset pipeline, Model.train with LossMonitor and
TimeMonitor, then Model.eval. msexp sweeps it unchanged."""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Accuracy, LossMonitor, Model, TimeMonitor
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser(description="LeNet on digits")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=32)
args = parser.parse_args()

ms.set_seed(0)
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
labels = digits.target.astype(np.int32)
train_ds = ds.NumpySlicesDataset({"image": images[:1400], "label": labels[:1400]},
                                 shuffle=True).batch(args.batch_size, drop_remainder=True)
eval_ds = ds.NumpySlicesDataset({"image": images[1400:], "label": labels[1400:]},
                                shuffle=False).batch(128)


class LeNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(8 * 4 * 4, 32)
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        x = self.pool(self.relu(self.conv(x)))
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


net = LeNet()
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), args.lr, args.momentum)
model = Model(net, loss, opt, metrics={"Accuracy": Accuracy()})
model.train(args.epochs, train_ds, callbacks=[LossMonitor(20), TimeMonitor()],
            dataset_sink_mode=False)
print(model.eval(eval_ds, dataset_sink_mode=False))
