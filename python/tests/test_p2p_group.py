"""Tagged and any-source point-to-point calls and grouped calls of the chorus Python package,
on numpy arrays, checked exactly. Run by every rank under the launcher, e.g.
    build/chorus-run -n 3 /usr/bin/python3 python/tests/test_p2p_group.py
Each rank runs the same unittest cases in the same order; a failed check fails that rank.
"""

import os
import sys
import threading
import time
import unittest

import numpy as np

import chorus

BIG = 70001  # float32 elements: over the 64 KiB eager size, so sent by rendezvous


def message(src, dst, tag, count, dtype=np.float32):
    """What src sends dst with tag: distinct per (src, dst, tag), exact in every dtype used."""
    return ((np.arange(count) * 7 + src * 1000 + dst * 100 + tag) % 4093).astype(dtype)


class P2PGroupTests(unittest.TestCase):
    comm = None

    @property
    def n(self):
        return self.comm.size

    @property
    def r(self):
        return self.comm.rank

    # ---- point to point ----

    def test_receives_posted_before_sends(self):
        # Every rank receives from every rank (itself too) before it sends: no deadlock.
        for count in (0, 5, BIG):
            ins = [np.full(count, -1, np.float32) for _ in range(self.n)]
            reqs = [self.comm.recv(ins[p], p, tag=3, async_op=True) for p in range(self.n)]
            reqs += [self.comm.send(message(self.r, p, 3, count), p, tag=3, async_op=True)
                     for p in range(self.n)]
            for req in reqs:
                req.wait()
            for p in range(self.n):
                np.testing.assert_array_equal(ins[p], message(p, self.r, 3, count))
                self.assertEqual(reqs[p].info, chorus.MessageInfo(p, 3, count))
            self.assertIsNone(reqs[self.n].info)  # a send has no message info

    def test_tags_out_of_order(self):
        right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
        tags = (4, 9, 2)
        sends = [self.comm.send(message(self.r, right, t, 10 + t), right, tag=t, async_op=True)
                 for t in tags]
        for t in reversed(tags):
            out = np.zeros(10 + t, np.float32)
            self.comm.recv(out, left, tag=t)
            np.testing.assert_array_equal(out, message(left, self.r, t, 10 + t))
        for req in sends:
            req.wait()

    def test_any_source_reports_sender(self):
        if self.r == 0:
            seen = set()
            for _ in range(self.n - 1):
                out = np.zeros(BIG, np.float32)
                out, info = self.comm.recv(out, chorus.ANY_SOURCE, tag=chorus.ANY_TAG,
                                           with_info=True)
                self.assertNotIn(info.source, seen)
                seen.add(info.source)
                self.assertEqual(info.tag, 20 + info.source)
                self.assertEqual(info.count, 100 * info.source)
                np.testing.assert_array_equal(out[:info.count],
                                              message(info.source, 0, 20 + info.source, info.count))
            self.assertEqual(seen, set(range(1, self.n)))
        else:
            self.comm.send(message(self.r, 0, 20 + self.r, 100 * self.r), 0, tag=20 + self.r)
        self.comm.barrier()

    def test_truncation_and_dtype_errors_keep_the_communicator(self):
        right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
        reqs = [self.comm.send(message(self.r, right, 1, 50), right, tag=1, async_op=True),
                self.comm.send(message(self.r, right, 2, 50), right, tag=2, async_op=True)]
        short = np.full(20, -1, np.float32)
        with self.assertRaises(chorus.TruncationError):
            self.comm.recv(short, left, tag=1)
        np.testing.assert_array_equal(short, message(left, self.r, 1, 50)[:20])
        with self.assertRaises(chorus.MismatchError):
            self.comm.recv(np.zeros(50, np.int32), left, tag=2)
        for req in reqs:
            req.wait()
        total = self.comm.allreduce(np.array([1], np.int64))
        self.assertEqual(int(total[0]), self.n)

    # ---- groups ----

    def test_group_fuses_and_fills_in_place(self):
        bufs = [np.arange(k + 1, dtype=np.float64) * (self.r + 1) for k in range(40)]
        ints = [np.full(3, self.r, np.int32) for _ in range(5)]
        gathered = None
        with chorus.group():
            for b in bufs:
                self.comm.allreduce(b)  # blocking: returns at once, done at the end of the block
            reqs = [self.comm.allreduce(i, op="max", async_op=True) for i in ints]
            gathered = self.comm.allgather(np.array([self.r, -self.r], np.int32))
            self.assertFalse(reqs[0].test())
            with self.assertRaises(chorus.InvalidUsageError):
                reqs[0].wait()
        scale = self.n * (self.n + 1) / 2
        for k, b in enumerate(bufs):
            np.testing.assert_array_equal(b, np.arange(k + 1, dtype=np.float64) * scale)
        for req in reqs:
            np.testing.assert_array_equal(req.wait(), np.full(3, self.n - 1, np.int32))
        np.testing.assert_array_equal(gathered, np.array([[q, -q] for q in range(self.n)], np.int32))

    def test_group_of_sends_first(self):
        # Every rank sends (blocking, large) before it receives: only a group makes it work.
        right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
        out = np.zeros(BIG, np.float32)
        chorus.group_start()
        self.comm.send(message(self.r, right, 6, BIG), right, tag=6)
        req = self.comm.recv(out, left, tag=6, async_op=True)
        chorus.group_end()
        req.wait()
        np.testing.assert_array_equal(out, message(left, self.r, 6, BIG))
        self.assertEqual(req.info, chorus.MessageInfo(left, 6, BIG))

    def test_group_usage(self):
        with self.assertRaises(chorus.InvalidUsageError):
            chorus.group_end()
        chorus.group_start()
        chorus.group_start()
        buf = np.array([1.0], np.float32)
        self.comm.allreduce(buf)
        chorus.group_end()
        self.assertEqual(buf[0], 1.0)  # nested: runs at the outermost end only
        chorus.group_end()
        self.assertEqual(buf[0], float(self.n))

    def test_other_thread_waits_until_the_group_ends(self):
        # A completion thread (as chorus.torch has) may wait for a request of an open group:
        # it blocks until the group's owner ends the group.
        x = np.array([1.0], np.float32)
        chorus.group_start()
        req = self.comm.allreduce(x, async_op=True)
        got = {}
        waiter = threading.Thread(target=lambda: got.setdefault("r", self.comm.wait_record(req._record)))
        waiter.start()
        time.sleep(0.2)
        self.assertTrue(waiter.is_alive())
        self.assertIsNone(self.comm.test_record(req._record))
        chorus.group_end()
        waiter.join(30)
        self.assertFalse(waiter.is_alive())
        self.assertEqual(got["r"], (0, ""))
        self.assertEqual(x[0], float(self.n))

    def test_groups_that_differ_fail_with_mismatch(self):
        if self.n < 2:
            self.skipTest("needs two ranks")
        sub = self.comm.split(0)
        try:
            a = np.ones(8, np.float32)
            with self.assertRaises((chorus.MismatchError, chorus.RemoteError)):
                with chorus.group():
                    if sub.rank == 0:
                        sub.allreduce(a[:4])
                        sub.allreduce(a[4:])
                    else:
                        sub.allreduce(a)
        finally:
            sub.destroy()


def make_comm():
    if "CHORUS_RANK" in os.environ:
        return chorus.init(timeout_sec=30)
    return chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())


def main():
    P2PGroupTests.comm = make_comm()
    started = time.monotonic()
    program = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False, verbosity=1)
    ok = program.result.wasSuccessful()
    print(f"rank {P2PGroupTests.comm.rank}: point-to-point and groups "
          f"{'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s", flush=True)
    P2PGroupTests.comm.destroy()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
