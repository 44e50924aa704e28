"""A plain hand-written MindSpore training loop: seed 000's MLP on digits, no msexp.

Usage: python benchmarks/handwritten_mlp.py EPOCHS BATCH {fused|split|buffers} [MICRO_SIZE]
  fused: grad and optimizer in one ms.jit step, as the tutorials write it;
  split: grad in one ms.jit function, optimizer in another;
  buffers: grads added into parameter buffers in one ms.jit function, optimizer step and
  zeroing in another (seed 000's Accumulator; what msexp's step does). MICRO_SIZE > 1
  always accumulates this way.
Prints one JSON line: samples_per_s (steady-state updates), train_s, eval_accuracy.
"""

import json
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import nn, ops

sys.path.insert(0, ".")
from benchmarks.networks import digits  # noqa: E402  (the same data as msexp's workload)

epochs, batch, style = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
micro_size = int(sys.argv[4]) if len(sys.argv) > 4 else 1
ms.set_seed(0)
x_train, y_train, x_eval, y_eval = digits(28)
net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 512), nn.ReLU(), nn.Dense(512, 512),
                        nn.ReLU(), nn.Dense(512, 10))
loss_fn = nn.CrossEntropyLoss()
opt = nn.Momentum(net.trainable_params(), 0.02, 0.9)


def forward(x, y):
    return loss_fn(net(x), y) / micro_size


grad_fn = ms.value_and_grad(forward, None, opt.parameters)


@ms.jit
def fused_step(x, y):
    loss, grads = grad_fn(x, y)
    opt(grads)
    return loss


@ms.jit
def grad_step(x, y):
    return grad_fn(x, y)


@ms.jit
def opt_step(grads):
    opt(grads)
    return True


inner_grads = opt.parameters.clone(prefix="accumulate_", init="zeros")
hyper_map = ops.HyperMap()


@ms.jit
def accumulate_step(x, y):
    loss, grads = grad_fn(x, y)
    hyper_map(ops.partial(ops.assign_add), inner_grads, grads)
    return loss


@ms.jit
def apply_step():
    opt(inner_grads)
    hyper_map(ops.partial(ops.assign), inner_grads, hyper_map(ops.zeros_like, inner_grads))
    return True


def train_step(x, y):
    if micro_size > 1 or style == "buffers":
        m = len(x) // micro_size
        losses = [accumulate_step(ms.Tensor(x[i * m:(i + 1) * m]),
                                  ms.Tensor(y[i * m:(i + 1) * m])) for i in range(micro_size)]
        apply_step()
        return sum(losses[1:], losses[0])
    x, y = ms.Tensor(x), ms.Tensor(y)
    if style == "fused":
        return fused_step(x, y)
    loss, grads = grad_step(x, y)
    opt_step(grads)
    return loss


times = []
start = time.perf_counter()
for epoch in range(epochs):
    order = np.random.default_rng(epoch).permutation(len(x_train))
    for i in range(0, len(order) - batch + 1, batch):
        ids = order[i:i + batch]
        t = time.perf_counter()
        loss = train_step(x_train[ids], y_train[ids])
        float(loss.asnumpy())
        times.append(time.perf_counter() - t)
    logits = net(ms.Tensor(x_eval)).asnumpy()
    accuracy = float((logits.argmax(1) == y_eval).mean())
steady = times[1:]
print(json.dumps({"samples_per_s": batch * len(steady) / sum(steady),
                  "train_s": time.perf_counter() - start, "eval_accuracy": accuracy,
                  "loss": float(ops.stop_gradient(loss).asnumpy())}))
