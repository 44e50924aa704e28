"""A Model.train script that checkpoints with ModelCheckpoint and resumes when msexp runs
it again: the three lines marked `resume` are all it takes."""

import argparse
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Callback, CheckpointConfig, Model, ModelCheckpoint

from msexp import hooks

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--pause_s", type=float, default=0.0)
args = parser.parse_args()

ms.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int32)
train_ds = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(32)


class Pause(Callback):
    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        print(f"finished epoch {epoch}", flush=True)
        time.sleep(args.pause_s)


net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
opt = nn.Momentum(net.trainable_params(), 0.05, 0.9)
model = Model(net, nn.CrossEntropyLoss(), opt)
config = CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=2)
saver = ModelCheckpoint("model", directory=str(hooks.output_dir("ckpt")), config=config)  # resume
start = hooks.resume(net, opt)                                                           # resume
model.train(args.epochs, train_ds, callbacks=[saver, Pause()], initial_epoch=start,     # resume
            dataset_sink_mode=False)
print(f"started_at_epoch: {start}")
print(f"trained_epochs: {args.epochs - start}")
