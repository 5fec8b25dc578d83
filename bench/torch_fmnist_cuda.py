#!/usr/bin/env python3
"""The anchor of fmnist-train --device cuda: the same reference CNN in PyTorch on the GPU, img/s per batch size.

usage: torch_fmnist_cuda.py [--batches 64,256,1024] [--steps 64:1500,256:600,1024:200] [--warmup 30]
       torch_fmnist_cuda.py --profile BATCH     (where torch's eager step spends the GPU's time, per operator)

The model is bench-anchors/torch_ddp_fmnist.py's Net (conv 1-32-3, relu, conv 32-64-3, relu, maxpool 2, flatten,
fc 9216-128, relu, fc 128-10), float32, SGD lr 0.05 momentum 0.9, the data already on the GPU. For each batch size:
  eager        the usual loop (zero_grad, forward, loss, backward, step), a new batch each step from a GPU tensor;
  graph        the whole step captured once with torch.cuda.graphs (static input, the batch fixed: torch's best case);
each with cuDNN's TF32 off (true float32, cohort's arithmetic) and, for the graph, also with torch's default
(cudnn.allow_tf32 = True, which rounds the convolutions' inputs to 10-bit mantissas). cudnn.benchmark is on.
Prints one line per measurement:  torch <mode> batch B: X img/s (Y ms/step)

--profile B runs 20 eager steps of batch B in true float32 under torch.profiler (CUDA activity) after the warm-up and
prints each GPU kernel's time per step, most first (kernels only: an operator's row would count its kernels' time a
second time, and torch 2's annotation rows span whole optimizer steps). Beside it, fmnist-train --device cuda
--profile times each of cohort's layers from event to event, so its figures also hold the GPU's idle time between
eager launches: small parts (gather, loss, ReLU, pooling) look slower there than their kernels are.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.conv1 = nn.Conv2d(1, 32, 3)
        s.conv2 = nn.Conv2d(32, 64, 3)
        s.fc1 = nn.Linear(9216, 128)
        s.fc2 = nn.Linear(128, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.conv2(F.relu(s.conv1(x)))), 2)
        return s.fc2(F.relu(s.fc1(x.flatten(1))))


def make(dev):
    torch.manual_seed(0)
    net = Net().to(dev)
    return net, torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)


def stepper(batch, data, labels):
    """The eager training step on a fresh model: step(i) trains on the i-th batch of data (cycling through it)."""
    net, opt = make(data.device)
    n = data.shape[0] // batch

    def step(i):
        j = i % n
        x, y = data[j * batch:(j + 1) * batch], labels[j * batch:(j + 1) * batch]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def eager(batch, steps, warmup, data, labels):
    step = stepper(batch, data, labels)
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def graphed(batch, steps, warmup, data, labels):
    net, opt = make(data.device)
    sx, sy = data[:batch].clone(), labels[:batch].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = F.cross_entropy(net(sx), sy)
        loss.backward()
        opt.step()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        g.replay()
    torch.cuda.synchronize()
    el = time.perf_counter() - t
    if not torch.isfinite(loss).item():
        raise SystemExit("torch graph: the loss is not finite")
    return el


def profile(batch, warmup, data, labels, steps=20):
    from torch.profiler import ProfilerActivity, profile as torch_profile
    torch.backends.cudnn.allow_tf32 = False
    step = stepper(batch, data, labels)
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
    from torch.autograd import DeviceType
    rows = []
    for e in prof.key_averages():
        if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
            continue  # the kernels themselves: an operator's row holds its kernels' time again
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            rows.append((us / steps, e.key, e.count / steps))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"torch profile batch {batch}: {total:.1f} us of kernel time a step, the update's included (eager, float32,"
          f" {steps} steps)")
    for us, key, calls in rows[:25]:
        print(f"torch profile batch {batch}: {us:9.1f} us  {calls:4.1f} calls  {key}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,256,1024")
    ap.add_argument("--steps", default="64:1500,256:600,1024:200")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--modes", default="graph,eager,graph-tf32")
    ap.add_argument("--profile", type=int, default=0, metavar="BATCH")
    a = ap.parse_args()
    steps = dict((int(k), int(v)) for k, v in (p.split(":") for p in a.steps.split(",")))
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    data = torch.randn(60000, 1, 28, 28, device=dev)
    labels = torch.randint(0, 10, (60000,), device=dev)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    if a.profile:
        profile(a.profile, a.warmup, data, labels)
        return
    for b in (int(x) for x in a.batches.split(",")):
        n = steps.get(b, 300)
        for mode in a.modes.split(","):
            torch.backends.cudnn.allow_tf32 = mode.endswith("tf32")
            fn = eager if mode.startswith("eager") else graphed
            el = fn(b, n, a.warmup, data, labels)
            print(f"torch {mode} batch {b}: {b * n / el:.0f} img/s ({1e3 * el / n:.3f} ms/step)", flush=True)


if __name__ == "__main__":
    main()
