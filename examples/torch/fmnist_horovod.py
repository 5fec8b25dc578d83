"""Fashion-MNIST with the reference CNN, written the ordinary Horovod way; cohort runs it through its import line.

    build/bin/cohortrun -np 2 /usr/bin/python3 examples/torch/fmnist_horovod.py --epochs 1
    (with PYTHONPATH=build/python; a Horovod user would change only `import cohort.torch as hvd`)

The last line is machine-readable, like fmnist-train's: final: steps=N loss=X test_acc=Y img_per_s=Z
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import cohort.torch as hvd

DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load(kind):
    with gzip.open(os.path.join(DATA, f"{kind}-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(os.path.join(DATA, f"{kind}-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(x.reshape(-1, 1, 28, 28), dtype=torch.float32) / 255.0, torch.tensor(y, dtype=torch.long)


class Net(nn.Module):
    """conv 1-32-3, conv 32-64-3, maxpool 2, fc 9216-128, fc 128-10 (fmnist-train's reference CNN)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: run the epochs)")
    ap.add_argument("--batch", type=int, default=64, help="batch per rank")
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank (scaled by the world size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--fp16-allreduce", action="store_true", help="gradients travel as float16")
    args = ap.parse_args()

    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    train_set = TensorDataset(xtr, ytr)
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    steps, loss, t0 = 0, torch.tensor(0.0), time.perf_counter()
    done = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
            if hvd.rank() == 0 and steps % 100 == 0:
                print(f"epoch {epoch} step {steps} loss {loss.item():.4f}", flush=True)
            if steps == args.steps:
                done = True
                break
        if done:
            break
    elapsed = time.perf_counter() - t0

    # Test accuracy: each rank scores its share of the test set; the counts are summed over the ranks.
    model.eval()
    with torch.no_grad():
        idx = torch.arange(hvd.rank(), len(xte), hvd.size())
        correct = sum((model(xte[i]).argmax(1) == yte[i]).sum() for i in idx.split(1000))
    correct = hvd.allreduce(correct, op=hvd.Sum, name="correct").item()
    mean_loss = hvd.allreduce(loss.detach(), name="loss").item()
    if hvd.rank() == 0:
        img_per_s = steps * args.batch * hvd.size() / elapsed
        print(f"final: steps={steps} loss={mean_loss:.4f} test_acc={correct / len(xte):.4f} img_per_s={img_per_s:.0f}",
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
