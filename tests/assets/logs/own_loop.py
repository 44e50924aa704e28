"""A training loop of its own, as PyTorch-style tutorials write one in MindSpore, in three
styles of output (--style):

- tqdm: a bar per epoch whose postfix shows the batch's loss and accuracy, a validation
  bar cleared when done (`leave=False`), a summary line per epoch (`tqdm.write`) and a
  JSON record of the run at the end;
- jsonl: a JSON record every 4 steps and after each validation, as structured loggers
  write them;
- logging: Python logging through mindcv's `set_logger` (its default `color=True`: rich's
  `RichHandler`, which colours numbers where FORCE_COLOR is set), `name = value` pairs: a
  line every 7 steps, a validation line and an epoch summary of both.

Run with stdout and stderr into one file, unbuffered (as a trial runs it), it wrote
tests/assets/logs/tqdm_loop.log, jsonl_loop.log and logging_loop*.log
(tests/assets/logs/README.md)."""

import argparse
import json
import time

import mindspore as ms
import numpy as np
from mindcv.utils.logger import set_logger
from mindspore import nn
from sklearn.datasets import load_digits
from tqdm import tqdm

parser = argparse.ArgumentParser()
parser.add_argument("--style", choices=["tqdm", "jsonl", "logging"], default="tqdm")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
BATCH = 100
ms.set_seed(0)
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32).reshape(-1, 64)
labels = digits.target.astype(np.int32)
train = [(ms.Tensor(images[i:i + BATCH]), ms.Tensor(labels[i:i + BATCH]))
         for i in range(0, 1400, BATCH)]
valid = [(ms.Tensor(images[i:i + BATCH]), ms.Tensor(labels[i:i + BATCH]))
         for i in range(1400, len(images), BATCH)]
net = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
loss_fn = nn.CrossEntropyLoss()
optimizer = nn.SGD(net.trainable_params(), learning_rate=args.lr, momentum=0.9)


def forward(x, y):
    logits = net(x)
    return loss_fn(logits, y), logits


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters, has_aux=True)


def train_step(x, y):
    (loss, logits), grads = grad_fn(x, y)
    optimizer(grads)
    return float(loss), float((logits.argmax(1) == y).astype(ms.float32).mean())


def validate(batches):
    net.set_train(False)
    correct, total, losses = 0, 0, []
    for x, y in batches:
        logits = net(x)
        losses.append(float(loss_fn(logits, y)))
        correct += int((logits.argmax(1) == y).sum())
        total += len(y)
    net.set_train(True)
    return float(np.mean(losses)), correct / total


log = set_logger("own_loop")
if args.style == "logging":
    log.info(f"lr = {args.lr}, epochs = {args.epochs}")
start, best = time.time(), 0.0
for epoch in range(1, args.epochs + 1):
    net.set_train(True)
    tick = time.time()
    bar = tqdm(train, desc=f"Epoch {epoch}") if args.style == "tqdm" else train
    for step, (x, y) in enumerate(bar, 1):
        loss, acc = train_step(x, y)
        if args.style == "tqdm":
            bar.set_postfix(loss=loss, acc=acc)
        elif args.style == "logging" and step % 7 == 0:
            log.info(f"epoch = {epoch}, step = {step}, loss = {loss:.4f}, acc = {acc:.4f}, "
                     f"step_ms = {1000 * (time.time() - tick) / step:.1f}")
        elif args.style == "jsonl" and step % 4 == 0:
            print(json.dumps({"phase": "train", "epoch": epoch, "step": step,
                              "loss": round(loss, 5), "acc": acc}))
    batches = tqdm(valid, desc="Validation", leave=False) if args.style == "tqdm" else valid
    val_loss, val_acc = validate(batches)
    best = max(best, val_acc)
    if args.style == "tqdm":
        tqdm.write(f"epoch {epoch}: val_loss={val_loss:.4f}, val_acc={val_acc:.4f}")
    elif args.style == "logging":
        log.info(f"validation: loss = {val_loss:.4f}, acc = {val_acc:.4f}")
        log.info(f"epoch {epoch}: loss = {loss:.4f}, acc = {acc:.4f}, val_loss = {val_loss:.4f}, "
                 f"val_acc = {val_acc:.4f}, step_ms = {1000 * (time.time() - tick) / step:.1f}")
    else:
        print(json.dumps({"phase": "val", "epoch": epoch, "val_loss": round(val_loss, 5),
                          "val_acc": round(val_acc, 5), "improved": val_acc >= best}))
if args.style == "tqdm":
    print(json.dumps({"run": "digits-mlp", "best_val_acc": round(best, 5),
                      "train_seconds": round(time.time() - start, 2)}))
