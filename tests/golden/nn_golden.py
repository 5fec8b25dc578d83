#!/usr/bin/env python3
"""Reference numbers for tests/golden/test_nn_golden.c, computed by PyTorch.

usage: nn_golden.py OUT_FILE

Writes the weights, inputs and torch's outputs, gradients, losses and updated weights for:
  cnn    the reference CNN of bench-anchors/torch_ddp_fmnist.py: one forward/backward, then 20 SGD steps
         (lr 0.05, momentum 0.9) on 20 different batches
  small  conv (stride 2, padding 1) -> batchnorm2d -> relu -> maxpool -> linear, train and eval mode, then 3 steps
         of SGD with Nesterov momentum and weight decay after clip_grad_norm_
  mlp    784 -> 256 -> 10, 5 steps of AdamW
File format (little-endian): b"CNNG", u32 record count, then per record: u32 name length, name, u32 ndim,
i64 dims, float32 data. Parameter names are cohort's ("conv1.weight"), not the torch module's.
Fails loudly (non-zero exit) when torch is missing: the golden tests must not pass without it.
"""
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
records = []


def put(name, t):
    t = torch.as_tensor(t).detach().to(torch.float32).contiguous()
    records.append((name, list(t.shape) if t.dim() > 0 else [1], t.reshape(-1).numpy().tobytes()))


def put_params(prefix, named):
    for name, p in named:
        put(prefix + name, p)


class Net(nn.Module):  # bench-anchors/torch_ddp_fmnist.py, with cohort's layer names
    def __init__(s):
        super().__init__()
        s.conv1 = nn.Conv2d(1, 32, 3)
        s.conv2 = nn.Conv2d(32, 64, 3)
        s.fc1 = nn.Linear(9216, 128)
        s.fc2 = nn.Linear(128, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.conv2(F.relu(s.conv1(x)))), 2)
        return s.fc2(F.relu(s.fc1(x.flatten(1))))


class Small(nn.Module):
    def __init__(s):
        super().__init__()
        s.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        s.bn = nn.BatchNorm2d(4)
        s.fc = nn.Linear(64, 10)

    def forward(s, x):
        return s.fc(F.max_pool2d(F.relu(s.bn(s.conv(x))), 2).flatten(1))


class MLP(nn.Module):
    def __init__(s):
        super().__init__()
        s.fc1 = nn.Linear(784, 256)
        s.fc2 = nn.Linear(256, 10)

    def forward(s, x):
        return s.fc2(F.relu(s.fc1(x.flatten(1))))


def cnn():
    torch.manual_seed(0)
    net = Net()
    put_params("cnn.param.", net.named_parameters())
    x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    put("cnn.x", x)
    put("cnn.y", y)
    logits = net(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    put("cnn.logits", logits)
    put("cnn.loss", loss)
    put_params("cnn.grad.", ((n, p.grad) for n, p in net.named_parameters()))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    xs, ys = torch.rand(20, 8, 1, 28, 28), torch.randint(0, 10, (20, 8))
    put("cnn.train.x", xs)
    put("cnn.train.y", ys)
    losses = []
    for s in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(net(xs[s]), ys[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    put("cnn.train.loss", torch.tensor(losses))
    put_params("cnn.final.", net.named_parameters())


def small():
    torch.manual_seed(1)
    net = Small()
    with torch.no_grad():  # batchnorm away from its identity init, so every term is exercised
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
        net.bn.running_mean.uniform_(-0.2, 0.2)
        net.bn.running_var.uniform_(0.5, 1.5)
    put_params("small.param.", net.named_parameters())
    put("small.param.bn.running_mean", net.bn.running_mean)
    put("small.param.bn.running_var", net.bn.running_var)
    x, y = torch.randn(6, 3, 15, 15), torch.randint(0, 10, (6,))
    put("small.x", x)
    put("small.y", y)
    logits = net(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    put("small.logits", logits)
    put("small.loss", loss)
    put_params("small.grad.", ((n, p.grad) for n, p in net.named_parameters()))
    put("small.after.bn.running_mean", net.bn.running_mean)
    put("small.after.bn.running_var", net.bn.running_var)
    net.eval()
    with torch.no_grad():
        put("small.eval_logits", net(x))
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    norms = []
    for s in range(3):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5).item())
        opt.step()
    put("small.clip.norms", torch.tensor(norms))
    put_params("small.final.", net.named_parameters())


def mlp():
    torch.manual_seed(2)
    net = MLP()
    put_params("mlp.param.", net.named_parameters())
    xs, ys = torch.rand(5, 16, 1, 28, 28), torch.randint(0, 10, (5, 16))
    put("mlp.train.x", xs)
    put("mlp.train.y", ys)
    # betas (0.9, 0.999), eps 1e-8; a weight decay large enough that its term (lr * wd * w ~ 2e-5 a step) is seen
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.5)
    losses = []
    for s in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(net(xs[s]), ys[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    put("mlp.train.loss", torch.tensor(losses))
    put_params("mlp.final.", net.named_parameters())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: nn_golden.py OUT_FILE")
    cnn()
    small()
    mlp()
    with open(sys.argv[1], "wb") as f:
        f.write(b"CNNG" + struct.pack("<I", len(records)))
        for name, shape, data in records:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(shape)))
            f.write(struct.pack("<%dq" % len(shape), *shape) + data)
    print("nn_golden.py: wrote %d records to %s (torch %s)" % (len(records), sys.argv[1], torch.__version__))


if __name__ == "__main__":
    main()
