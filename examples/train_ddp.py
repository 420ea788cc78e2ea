#!/usr/bin/python3
"""train_ddp.py - data-parallel training of an MLP on scikit-learn's digits with PyTorch
DistributedDataParallel over the "chorus" backend (or gloo, for comparison). Prints loss,
accuracy, step time and time spent in communication, and checks that the parameters after
training equal those of a single-process full-batch reference (allclose, 1e-5).

    build/chorus-run -n 4 /usr/bin/python3 examples/train_ddp.py
    torchrun --standalone --nproc_per_node 4 examples/train_ddp.py
    build/chorus-run -n 4 /usr/bin/python3 examples/train_ddp.py --backend gloo --comm-hook chorus
    build/chorus-run -n 4 /usr/bin/python3 examples/train_ddp.py --compression int4

--compression CODEC averages the buckets through chorus.torch.compress_hook (fp16, bf16, int8,
int4, topk:FRACTION; error feedback per bucket for int4 and top-k unless --error-feedback off);
the result is then lossy, so the reference comparison is skipped (ranks must still agree bit for
bit).

Each rank trains on its slice of every global batch (batch_per_rank x world_size samples).
Communication time is measured by a comm hook that times each bucket allreduce from posting to
completion ("in flight", merged over overlapping buckets) and, separately, as the step time
not explained by compute alone ("exposed", from extra steps run under no_sync()).
"""

import argparse
import datetime
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

RTOL = ATOL = 1e-5
TEST_SAMPLES = 297  # the last 297 of sklearn's 1797 digits are held out
WARMUP_STEPS = 3
GLOO_DRAIN_SEC = 0.5


def import_chorus_torch():
    """chorus.torch from the installed package, else from this repository's python/."""
    try:
        import chorus.torch as chorus_torch
    except ImportError:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.insert(0, os.path.join(repo, "python"))
        import chorus.torch as chorus_torch
    return chorus_torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="chorus", choices=("chorus", "gloo"))
    p.add_argument("--comm-hook", default="timed", choices=("timed", "none", "chorus"),
                   help="timed: time the default group's bucket allreduces (default); none: "
                        "DDP's built-in path, untimed; chorus: average through Chorus with "
                        "chorus.torch.allreduce_hook (for a gloo default group)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-per-rank", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bucket-cap-mb", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=0,
                   help="print the loss and the test accuracy every N steps (rank 0; 0: only at the end)")
    p.add_argument("--exposed-steps", type=int, default=10,
                   help="extra no_sync() steps used to measure compute-only time (0: skip)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads per rank (0: cores / ranks on this host)")
    p.add_argument("--compression", default=None,
                   help="average buckets with chorus.torch.compress_hook(CODEC): fp16, bf16, int8, "
                        "int4, topk:FRACTION (any backend; implies --no-check)")
    p.add_argument("--compression-scope", default="all", choices=("inter", "all"),
                   help="where the codec applies: all (default, so that one host shows it) or "
                        "inter (only data crossing hosts)")
    p.add_argument("--error-feedback", default="auto", choices=("auto", "on", "off"),
                   help="residual per bucket: auto = on for int4 and top-k")
    p.add_argument("--no-check", action="store_true",
                   help="skip the comparison with the single-process reference")
    args = p.parse_args()
    if args.compression:
        args.no_check = True  # compression is lossy: no single-process reference to match
    return args


def load_digits_tensors():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    n_train = len(y) - TEST_SAMPLES
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def make_model(hidden, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def global_batches(n_train, global_batch, steps, seed):
    """steps index arrays of global_batch samples: shuffled epochs, concatenated."""
    epochs = -(-steps * global_batch // n_train) + 1
    rng = np.random.RandomState(seed)
    stream = np.concatenate([rng.permutation(n_train) for _ in range(epochs)])
    return [torch.from_numpy(stream[s * global_batch:(s + 1) * global_batch]) for s in range(steps)]


class CommTimer:
    """Bucket allreduce intervals (post -> completion) of the current step; their union is
    the step's communication time (buckets overlap each other and backward)."""

    def __init__(self):
        self.intervals = []
        self.steps_sec = []

    def record(self, started, finished):
        self.intervals.append((started, finished))

    def end_step(self):
        union_sec, reach = 0.0, None
        for start, end in sorted(self.intervals):
            if reach is None or start > reach:
                union_sec += end - start
                reach = end
            elif end > reach:
                union_sec += end - reach
                reach = end
        self.steps_sec.append(union_sec)
        self.intervals = []


def timed_allreduce_hook(state, bucket):
    """torch's default allreduce hook (divide, sum over the group), timed."""
    group, world_size, timer = state
    started = time.perf_counter()
    buffer = bucket.buffer().div_(world_size)
    future = dist.all_reduce(buffer, group=group, async_op=True).get_future()

    def finished(fut):
        timer.record(started, time.perf_counter())
        return fut.value()[0]

    return future.then(finished)


def timed_chorus_hook(state, bucket):
    """A chorus.torch hook (allreduce_hook, or a compress_hook), timed."""
    chorus_state, timer, hook = state
    started = time.perf_counter()

    def finished(fut):
        timer.record(started, time.perf_counter())
        return fut.value()

    return hook(chorus_state, bucket).then(finished)


def setup_hook(ddp, args, timer, chorus_torch):
    """Registers the comm hook; returns an object to shut down at the end (or None)."""
    if args.compression:
        chorus_state = chorus_torch.ChorusHookState()
        feedback = None if args.error_feedback == "auto" else args.error_feedback == "on"
        hook = chorus_torch.compress_hook(args.compression, feedback, args.compression_scope)
        ddp.register_comm_hook((chorus_state, timer, hook), timed_chorus_hook)
        return chorus_state
    if args.comm_hook == "timed":
        ddp.register_comm_hook((None, dist.get_world_size(), timer), timed_allreduce_hook)
    elif args.comm_hook == "chorus":
        chorus_state = chorus_torch.ChorusHookState()
        ddp.register_comm_hook((chorus_state, timer, chorus_torch.allreduce_hook), timed_chorus_hook)
        return chorus_state
    return None


def train(ddp, batches, data, args, rank, world, timer, test_data=None):
    """Runs the DDP steps; returns per-step (forward+backward, total) seconds and losses."""
    x, y = data
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    fb_sec, step_sec, losses = [], [], []
    for step, batch in enumerate(batches):
        mine = batch[rank * args.batch_per_rank:(rank + 1) * args.batch_per_rank]
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(x[mine]), y[mine])
        loss.backward()  # DDP's bucket allreduces run while backward continues
        backward_done = time.perf_counter()
        optimizer.step()
        finished = time.perf_counter()
        timer.end_step()
        fb_sec.append(backward_done - started)
        step_sec.append(finished - started)
        losses.append(loss.item())
        last = step == len(batches) - 1
        if args.log_every and (step % args.log_every == 0 or last):
            log_step(step, losses, step_sec, timer, rank, world)
        if args.eval_every and test_data is not None and (step % args.eval_every == 0 or last):
            log_eval(step, ddp.module, losses, test_data, rank, world)
    return fb_sec, step_sec, losses


def log_eval(step, model, losses, test_data, rank, world):
    """"eval step S loss L acc A": the global training loss of the step and the test accuracy."""
    loss = torch.tensor([losses[-1]], dtype=torch.float64)
    dist.all_reduce(loss)
    if rank == 0:
        print(f"eval step {step} loss {loss.item() / world:.6f} acc {accuracy(model, test_data):.6f}", flush=True)


def log_step(step, losses, step_sec, timer, rank, world):
    # The global loss is the mean of the ranks' losses (equal shards); untimed.
    loss = torch.tensor([losses[-1]], dtype=torch.float64)
    dist.all_reduce(loss)
    if rank == 0:
        comm_ms = timer.steps_sec[-1] * 1e3 if timer.steps_sec else float("nan")
        print(f"step {step:4d}  loss {loss.item() / world:.4f}  step {step_sec[-1] * 1e3:7.2f} ms"
              f"  comm in flight {comm_ms:6.2f} ms", flush=True)


def compute_only_sec(ddp, batches, data, args, rank):
    """Mean forward+backward time without gradient communication (DDP no_sync), for the
    exposed-communication estimate; gradients are zeroed so parameters are unaffected."""
    x, y = data
    times = []
    with ddp.no_sync():
        for batch in batches[:args.exposed_steps]:
            mine = batch[rank * args.batch_per_rank:(rank + 1) * args.batch_per_rank]
            started = time.perf_counter()
            F.cross_entropy(ddp(x[mine]), y[mine]).backward()
            times.append(time.perf_counter() - started)
    for p in ddp.parameters():
        p.grad = None
    return float(np.median(times[1:] if len(times) > 1 else times)) if times else float("nan")


def reference_parameters(args, batches, data):
    """The same model trained in one process on the whole global batch each step."""
    x, y = data
    model = make_model(args.hidden, args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for batch in batches:
        optimizer.zero_grad(set_to_none=False)
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def max_param_diff(params, reference):
    diffs = [(p - q).abs().max().item() for p, q in zip(params, reference)]
    close = all(torch.allclose(p, q, rtol=RTOL, atol=ATOL) for p, q in zip(params, reference))
    return max(diffs), close


def ranks_agree_bitwise(params):
    """Every rank holds bit-identical parameters: MAX and MIN over ranks of a checksum of the
    parameter bits are equal."""
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    bits = flat.view(torch.int32).to(torch.int64)
    checksum = (bits * torch.arange(1, bits.numel() + 1, dtype=torch.int64)).sum().reshape(1)
    high, low = checksum.clone(), checksum.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return bool(high.item() == low.item())


def accuracy(model, data):
    x, y = data
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main():
    args = parse_args()
    world_hint = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // max(1, world_hint)))
    chorus_torch = import_chorus_torch() if (args.backend == "chorus" or args.compression or
                                             args.comm_hook == "chorus") else None
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=300))
    status = run(args, chorus_torch)
    shut_down()
    return status


def run(args, chorus_torch):
    """Trains, measures and reports; the DDP model and its hook live only in here."""
    rank, world = dist.get_rank(), dist.get_world_size()
    train_data, test_data = load_digits_tensors()
    global_batch = args.batch_per_rank * world
    batches = global_batches(len(train_data[1]), global_batch, args.steps, args.seed)
    model = make_model(args.hidden, args.seed)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    timer = CommTimer()
    hook_state = setup_hook(ddp, args, timer, chorus_torch)
    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        print(f"train_ddp: backend {args.backend}, hook {args.comm_hook}, {world} ranks, "
              f"{nparams} parameters ({nparams * 4 / 1e6:.2f} MB of gradients), global batch "
              f"{global_batch}, {args.steps} steps", flush=True)

    fb_sec, step_sec, losses = train(ddp, batches, train_data, args, rank, world, timer, test_data)
    compute_sec = compute_only_sec(ddp, batches, train_data, args, rank) \
        if args.exposed_steps else float("nan")
    status = report(args, model, batches, train_data, test_data, losses, fb_sec, step_sec,
                    timer, compute_sec, rank, world, global_batch)
    if hook_state is not None:
        hook_state.shutdown()
    return status


def shut_down():
    """Ends the process group once every rank is done. With gloo, torch 1.13 can deadlock
    here: destroying ProcessGroupGloo joins its worker threads while holding the GIL, and a
    worker that is still freeing a finished work's tensors needs the GIL (pytorch/pytorch
    #56297). After the barrier no work is queued; the pause lets the workers finish freeing."""
    dist.barrier()
    if dist.get_backend() == "gloo":
        time.sleep(GLOO_DRAIN_SEC)
    dist.destroy_process_group()


def report(args, model, batches, train_data, test_data, losses, fb_sec, step_sec, timer,
           compute_sec, rank, world, global_batch):
    """Prints the figures on rank 0 and returns 0 if every rank's parameters are identical
    and (unless --no-check) match the single-process reference."""
    timed = slice(WARMUP_STEPS, None) if len(step_sec) > WARMUP_STEPS else slice(None)
    # Medians: one descheduled step on a shared 2-core machine must not skew the figures.
    step_ms = float(np.median(step_sec[timed])) * 1e3
    fb_ms = float(np.median(fb_sec[timed])) * 1e3
    comm_ms = float(np.median(timer.steps_sec[timed])) * 1e3 if timer.steps_sec and \
        args.comm_hook != "none" else float("nan")
    exposed_ms = max(0.0, fb_ms - compute_sec * 1e3) if compute_sec == compute_sec else float("nan")
    samples_per_sec = global_batch / (step_ms / 1e3)
    agree = ranks_agree_bitwise(list(model.parameters()))
    status = 0 if agree else 1
    diff_text = "skipped"
    if not args.no_check:
        reference = reference_parameters(args, batches, train_data)
        diff, close = max_param_diff(list(model.parameters()), reference)
        diff_text = f"{diff:.3g} ({'OK' if close else 'FAIL'}, allclose {RTOL:g})"
        status |= 0 if close else 1
    ok = torch.tensor([status], dtype=torch.int64)
    dist.all_reduce(ok, op=dist.ReduceOp.MAX)
    last_loss = torch.tensor([losses[-1]], dtype=torch.float64)
    dist.all_reduce(last_loss)
    final_loss = last_loss.item() / world
    if rank == 0:
        acc = accuracy(model, test_data)
        in_flight_pct = 100.0 * comm_ms / step_ms if comm_ms == comm_ms else float("nan")
        print(f"final loss {final_loss:.4f}, test accuracy {acc * 100:.2f}%", flush=True)
        print(f"step time {step_ms:.2f} ms ({samples_per_sec:.0f} samples/s), "
              f"forward+backward {fb_ms:.2f} ms, compute only {compute_sec * 1e3:.2f} ms", flush=True)
        print(f"communication: in flight {comm_ms:.2f} ms/step ({in_flight_pct:.0f}% of the step), "
              f"exposed {exposed_ms:.2f} ms/step", flush=True)
        print(f"parameters: ranks bit-identical {'yes' if agree else 'NO'}; max |DDP - "
              f"single-process reference| {diff_text}", flush=True)
        print(f"RESULT backend={args.backend} hook={args.comm_hook} "
              f"compression={args.compression or 'none'} ranks={world} "
              f"global_batch={global_batch} samples_per_sec={samples_per_sec:.1f} "
              f"step_ms={step_ms:.3f} comm_inflight_ms={comm_ms:.3f} "
              f"comm_exposed_ms={exposed_ms:.3f} final_loss={final_loss:.4f} test_acc={acc:.4f} "
              f"status={'ok' if ok.item() == 0 else 'FAIL'}", flush=True)
    return int(ok.item())


if __name__ == "__main__":
    sys.exit(main())
