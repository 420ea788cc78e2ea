"""One rank of the cross-host torch test (test_torch_hosts.sh): initialises the "chorus"
backend through init_method (tcp://HOST:PORT, or env:// with MASTER_ADDR/MASTER_PORT), RANK and
WORLD_SIZE, all-reduces rank+1 and checks the sum. Prints "ok rank R sum S in T s", or "init
failed in T s: ERROR" and exits 3 (T counts from after the imports).
Usage: torch_hosts.py INIT_METHOD TIMEOUT_SEC"""
import datetime
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: torch is not installed for this python", flush=True)
    sys.exit(77)

import chorus.torch  # noqa: F401,E402  (registers the backend)

start = time.monotonic()
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
try:
    dist.init_process_group("chorus", init_method=sys.argv[1], rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=int(sys.argv[2])))
except Exception as e:  # noqa: BLE001  (the test reads the message and the time)
    print(f"init failed in {time.monotonic() - start:.1f} s: {e}", flush=True)
    os._exit(3)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
want = size * (size + 1) / 2
assert torch.all(t == want), f"rank {rank}: got {t[:4]}, want {want}"
dist.barrier()
dist.destroy_process_group()
print(f"ok rank {rank} sum {want:g} in {time.monotonic() - start:.1f} s", flush=True)
