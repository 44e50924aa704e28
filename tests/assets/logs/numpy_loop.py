"""Softmax regression on scikit-learn's digits in plain numpy, a loop of its own that
prints the way small research scripts do, in two styles of output (--style):

- both: `print(args)` (argparse's `Namespace(...)`), the configuration as indented JSON
  and its optimizer as a dict on one line, the classes seen (a set), the schedule as
  single-dash options (`-epochs: 3 -lr: 0.5 ...`), and after training `over 3 epochs (mean loss:
  ...), opt_global_step: 42`, five words of prose (`seconds per epoch on average: ...`),
  a value in exponent form (`final grad norm: 4.96e-01`) and a table of aligned
  `name   =   value` rows;
- columns: a first training line marked only by its progress (`[0/3] initial loss:
  ...`), a step line of fixed-width columns (`epoch 1  step 7  lr: 0.5000  loss: ...`),
  a validation line of the same columns (`val  loss: ...  acc: ...  top1 err: ...`),
  top-5 accuracy of both sets on one line (`epoch 1 time: 1.2ms | train top5: ... | val
  top5: ...`), the epoch's two results as dicts on one line after a pair, the last one
  touching a pair (`epoch 1 elapsed: 1.2ms train {...} val {...}gap=0.0212`: a missing
  space), and a closing test line of the validation's columns (`test  loss: ...`);
- pipes: Lightning-style epoch lines of both phases (`epoch 1/3 | train loss=... acc=...
  | val loss=... acc=...`) after step lines of `loss=... acc=...`, each followed by `val:
  err=...`, PyTorch's MNIST example's `Test set: Average loss: ..., Accuracy: 332/397
  (84%)`, a closing `Test: loss=..., acc=..., err=...`, the test's top-5 accuracy logged
  in the model zoo's format (`...,123:INFO:test_top5: 0.9874, ..., errors: [52]`), the
  train and test results as two dicts after a pair, the last one touching `gap=...`.

Run with stdout and stderr into one file, it wrote tests/assets/logs/numpy_columns.log,
numpy_pipes.log and numpy_pipes_short.log (tests/assets/logs/README.md)."""

import argparse
import json
import logging
import time

import numpy as np
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--style", choices=["columns", "pipes"], default="columns")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--batch_size", type=int, default=100)
args = parser.parse_args()
print(args)
config = {"model": "softmax regression", "init": "Xavier uniform",
          "lr_decay": "x0.5 from epoch 2", "optim": {"name": "SGD", "momentum": 0.9}}
print("config = " + json.dumps(config, indent=2))
digits = load_digits()
images, labels = digits.data / 16.0, digits.target
train_x, train_y, val_x, val_y = images[:1400], labels[:1400], images[1400:], labels[1400:]
print(f"classes: {set(int(c) for c in train_y)}")
print(f"optimizer: {config['optim']}")
print(f"train samples: {len(train_x)}, val samples: {len(val_x)}")
print(f"-epochs: {args.epochs} -lr: {args.lr} -batch_size: {args.batch_size}")
rng = np.random.default_rng(0)
limit = np.sqrt(6 / (64 + 10))
weights, bias = rng.uniform(-limit, limit, (64, 10)), np.zeros(10)
velocity = [np.zeros_like(weights), np.zeros_like(bias)]


def evaluate(x, y):
    logits = x @ weights + bias
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    loss = float(-np.log(probs[np.arange(len(y)), y]).mean())
    return loss, float((probs.argmax(1) == y).mean()), probs


def top5(x, y):
    ranks = (x @ weights + bias).argsort(1)[:, -5:]
    return float((ranks == y[:, None]).any(1).mean())


def step(x, y, lr):
    loss, acc, probs = evaluate(x, y)
    probs[np.arange(len(y)), y] -= 1
    grads = [x.T @ probs / len(y), probs.mean(0)]
    for held, grad in zip(velocity, grads):
        held *= 0.9
        held += grad
    weights[...] -= lr * velocity[0]
    bias[...] -= lr * velocity[1]
    return loss, acc


if args.style == "columns":  # its first training line; the pipes' is `epoch 1/3 step 7/14`
    print(f"[0/{args.epochs}] initial loss: {evaluate(train_x, train_y)[0]:.4f}")
start, best, losses, steps = time.time(), 0.0, [], 0
for epoch in range(1, args.epochs + 1):
    lr = args.lr * (0.5 if epoch >= 2 else 1.0)
    tick = time.time()
    for number, first in enumerate(range(0, len(train_x), args.batch_size), 1):
        loss, acc = step(train_x[first:first + args.batch_size],
                         train_y[first:first + args.batch_size], lr)
        steps += 1
        if args.style == "columns" and number % 7 == 0:
            print(f"epoch {epoch}  step {number:2d}  lr: {lr:.4f}  loss: {loss:.4f}  "
                  f"acc: {acc:.4f}")
        elif number % 7 == 0:
            print(f"epoch {epoch}/{args.epochs} step {number}/{len(train_x) // args.batch_size}"
                  f" | loss={loss:.4f} acc={acc:.4f}")
    losses.append(loss)
    val_loss, val_acc, val_probs = evaluate(val_x, val_y)
    best = max(best, val_acc)
    epoch_ms = 1000 * (time.time() - tick)
    if args.style == "columns":
        print(f"val  loss: {val_loss:.4f}  acc: {val_acc:.4f}  top1 err: {1 - val_acc:.4f}")
        print(f"epoch {epoch} time: {epoch_ms:.1f}ms | train top5: {top5(train_x, train_y):.4f}"
              f" | val top5: {top5(val_x, val_y):.4f}")
        print(f"epoch {epoch} elapsed: {epoch_ms:.1f}ms train {{'train_loss': {loss:.4f}, "
              f"'train_acc': {acc:.4f}}} val {{'val_loss': {val_loss:.4f}, "
              f"'val_acc': {val_acc:.4f}}}gap={acc - val_acc:.4f}")
    else:
        print(f"epoch {epoch}/{args.epochs} | lr={lr} | train loss={loss:.4f} acc={acc:.4f} "
              f"top5={top5(train_x, train_y):.4f} | val loss={val_loss:.4f} acc={val_acc:.4f} "
              f"top5={top5(val_x, val_y):.4f} | {epoch_ms:.1f}ms")
        print(f"val: err={1 - val_acc:.4f}")
        correct = int(round(val_acc * len(val_y)))
        print(f"\nTest set: Average loss: {val_loss:.4f}, Accuracy: {correct}/{len(val_y)} "
              f"({100. * correct / len(val_y):.0f}%)\n")
if args.style == "columns":
    print(f"test  loss: {val_loss:.4f}  acc: {val_acc:.4f}  top1 err: {1 - val_acc:.4f}")
else:
    print(f"Test: loss={val_loss:.4f}, acc={val_acc:.4f}, err={1 - val_acc:.4f}")
    logging.basicConfig(format="%(asctime)s:%(levelname)s:%(message)s", level=logging.INFO)
    errors = (val_probs.argmax(1) != val_y).sum(keepdims=True)  # a numpy array: `[52]`
    logging.info(f"test_top5: {top5(val_x, val_y):.4f}, top1 acc: {val_acc:.4f}, "
                 f"errors: {errors}")
    print(f"done: seconds={time.time() - start:.2f} train {{'train_top5': "
          f"{top5(train_x, train_y):.4f}, 'train_acc': {acc:.4f}}} test {{'test_loss': "
          f"{val_loss:.4f}, 'test_acc': {val_acc:.4f}}}gap={acc - val_acc:.4f}")
print(f"over {args.epochs} epochs (mean loss: {np.mean(losses):.4f}), "
      f"opt_global_step: {steps}")
print(f"seconds per epoch on average: {(time.time() - start) / args.epochs:.4f}")
print(f"final grad norm: {np.linalg.norm(velocity[0]):.2e}")
print(f"Total time of the whole training: {time.time() - start:.2f}s")
for name, value in [("best_val_acc", best), ("train_seconds", time.time() - start)]:
    print(f"{name:<16}=   {value:.4f}")
