"""optim_step_torch.py: the anchor of bench/optim_step.c. torch.optim's SGD and AdamW on the reference CNN's
parameter shapes, one thread, the same values and cases as optim_step.c (read its header); prints the same lines.

    /usr/bin/python3 optim_step_torch.py [STEPS]      (default 100)
"""
import sys
import time

import torch

SHAPES = [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (128, 9216), (128,), (10, 128), (10,)]


def time_steps(opt, params, state, steps):
    samples = []
    for _ in range(steps):
        for p in params:
            for v in opt.state[p].values():
                if torch.is_tensor(v) and v.shape == p.shape:
                    v.fill_(state)
        t0 = time.perf_counter()
        opt.step()
        samples.append(1e3 * (time.perf_counter() - t0))
    return sorted(samples)[steps // 2]  # the same pick as optim_step.c


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    torch.set_num_threads(1)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.05) for s in SHAPES]
    print(f"# {sum(p.numel() for p in params)} parameters, median of {steps} steps (torch {torch.__version__})")
    for name in ("sgd", "adamw"):
        if name == "sgd":
            opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
        else:
            opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        opt.step()
        print(f"{name} normal ms={time_steps(opt, params, 1e-3 if name == 'sgd' else 1e-6, steps):.3f}", flush=True)
        for p in params:
            p.grad.fill_(0.0 if name == "sgd" else 1e-21)
        print(f"{name} subnormal ms={time_steps(opt, params, 1e-39, steps):.3f}", flush=True)


main()
