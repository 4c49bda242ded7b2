"""A small PyTorch loop with known per-step counts, for scripts/gpu-check.

Usage: python3 torch_probe_check.py STEPS READY GO DONE EXIT

Sets everything up before READY (CUDA context, tensors, a one-rank NCCL communicator and one
warm-up step), so that after GO each step makes exactly: two elementwise kernels (add_, mul_ on
one contiguous tensor), one all_reduce (when NCCL initialised) and one torch.cuda.synchronize().
Writes its own counts as JSON to DONE, then waits for EXIT (at most 120 s) so the agent reads
its last counts while it is alive. Exit 0 done, 2 usage or timeout.
"""
import json
import os
import socket
import sys
import time


def wait_for(path, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    steps = int(sys.argv[1])
    ready, go, done, exit_file = sys.argv[2:6]
    import torch

    dev = torch.device("cuda:0")
    x = torch.zeros(1 << 20, device=dev)
    y = torch.ones(1 << 10, device=dev)
    nccl = None
    try:
        import torch.distributed as dist

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(port))
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
        dist.all_reduce(y)  # creates the communicator (ncclCommInitRank*) before the gate
        nccl = dist
    except Exception as e:  # no NCCL in this build: the loop runs without collectives
        print(f"torch_probe_check: no NCCL ({e}); steps run without all_reduce", file=sys.stderr)
    x.add_(1.0)
    x.mul_(0.5)
    torch.cuda.synchronize()
    with open(ready, "w") as f:
        f.write(f"{os.getpid()}\n")
    if not wait_for(go):
        return 2
    t0 = time.time()
    for _ in range(steps):
        x.add_(1.0)
        x.mul_(0.5)
        if nccl is not None:
            nccl.all_reduce(y)
        torch.cuda.synchronize()
    elapsed = time.time() - t0
    counts = {
        "pid": os.getpid(),
        "steps": steps,
        "elementwise_kernels": 2 * steps,
        "all_reduce": steps if nccl is not None else 0,
        "synchronize": steps,
        "seconds": round(elapsed, 3),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if nccl is not None else None,
    }
    with open(done, "w") as f:
        f.write(json.dumps(counts) + "\n")
    ok = wait_for(exit_file)
    if nccl is not None:
        nccl.destroy_process_group()
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
