"""A launch-bound PyTorch loop for scripts/gpu-check stage 7: what the agent's probes cost a
real program on the real driver, measured as the program's own launch rate.

Usage: python3 torch_launch_cost.py SECONDS READY ROUNDS

After CUDA is set up it writes its pid to READY, then for SECONDS runs rounds of LAUNCHES tiny
kernels (x.add_ on a 256-element tensor: the host's launch path is the whole cost) followed by
one torch.cuda.synchronize(), appending "END_EPOCH_SECONDS ROUND_SECONDS" per round to ROUNDS
(flushed each round). The script that drives it attaches and detaches the agent at known times
and compares the rounds in each phase: probed vs unprobed in one process, one run.
"""
import os
import sys
import time

LAUNCHES = 2000


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    seconds = float(sys.argv[1])
    ready, rounds_path = sys.argv[2], sys.argv[3]
    import torch

    x = torch.zeros(256, device="cuda:0")
    for _ in range(100):  # warm-up: the kernel is loaded, the caching allocator settled
        x.add_(1.0)
    torch.cuda.synchronize()
    with open(ready, "w") as f:
        f.write(f"{os.getpid()}\n")
    end = time.time() + seconds
    with open(rounds_path, "w") as out:
        while time.time() < end:
            t0 = time.perf_counter()
            for _ in range(LAUNCHES):
                x.add_(1.0)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            out.write(f"{time.time():.6f} {dt:.6f}\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
