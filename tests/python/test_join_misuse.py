"""What join() refuses (docs/torch.md) is an error on every rank within seconds, never a hang. On 2 ranks; the mode
is argv[1]:

  allreduce    rank 1 has joined (hvd.join()) while rank 0 trains one more step and then calls hvd.allreduce on a
               tensor: the joined rank shadows only the optimizer's steps, so both ranks raise a CohortError
               (MismatchError: the joined rank's step count against the allreduce).
  two_engines  two DistributedOptimizers are alive and rank 1 calls hvd.join(): ValueError on rank 1, which aborts
               the job, so rank 0's next collective raises RemoteError instead of waiting.
  inside_step  rank 1 calls hvd.join() between backward() and step(): RuntimeError on rank 1 before anything is
               sent; rank 1 then exits, and rank 0's next step raises RemoteError instead of waiting.
Each rank prints "PASS (join misuse MODE)" when it saw the error it expects; cohortrun exits 0 only if both did.
"""
import faulthandler
import sys
import time

import torch

import cohort.torch as hvd


def model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def train_step(model, opt):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(torch.ones(3, 5)), torch.zeros(3, 2)).backward()
    opt.step()


def main(mode):
    faulthandler.dump_traceback_later(45, exit=True)  # a hang: every rank's stack, before ctest's TIMEOUT
    hvd.init()
    rank = hvd.rank()
    t0 = time.monotonic()
    expected = None
    try:
        if mode == "allreduce":
            model = model_fn()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())
            train_step(model, opt)
            expected = hvd.CohortError
            if rank == 1:
                hvd.join()
            else:
                train_step(model, opt)  # shadowed by rank 1
                hvd.allreduce(torch.ones(3))  # not shadowed: refused on both ranks
        elif mode == "two_engines":
            models = [model_fn(), model_fn()]
            opts = [hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                             named_parameters=m.named_parameters()) for m in models]
            if rank == 1:
                expected = ValueError
                hvd.join()
            else:
                expected = hvd.RemoteError
                time.sleep(0.5)
                train_step(models[0], opts[0])
        elif mode == "inside_step":
            model = model_fn()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())
            train_step(model, opt)
            if rank == 1:
                expected = RuntimeError
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(torch.ones(3, 5)), torch.zeros(3, 2)).backward()
                hvd.join()
            else:
                expected = hvd.RemoteError
                for _ in range(100):
                    train_step(model, opt)
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - t0
        if expected is not None and isinstance(e, expected) and took < 30:
            print(f"rank {rank}: {type(e).__name__} after {took:.2f} s: {e}", flush=True)
            print(f"PASS (join misuse {mode})", flush=True)
            return 0
        print(f"rank {rank}: expected {expected.__name__ if expected else '?'}, got {type(e).__name__}: {e}",
              flush=True)
        return 1
    print(f"rank {rank}: no error raised (expected {expected.__name__ if expected else '?'})", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
