#!/usr/bin/python3
"""gen_corpus.py - writes the seed corpus of the fuzz targets: valid messages and edge cases
for each, in the input layouts the targets document (fuzz_frame.c, fuzz_hello.c,
fuzz_status.c, fuzz_store.c, fuzz_zeros.c). Deterministic: rerunning rewrites the same files. The constants (communicator
ids, secrets, the canonical frame) must match the targets'.

Usage: /usr/bin/python3 tests/fuzz/gen_corpus.py [OUTDIR]   (default: tests/fuzz/corpus)
"""
import os
import struct
import sys

# ---- fuzz_frame: [got header 48][want header 48][why bytes][describe bytes] ----
FRAME_MAGIC = 0x43484652
COLL = {"allreduce": 0, "broadcast": 1, "reduce": 2, "allgather": 3, "barrier": 8, "send": 9}


def frame(magic=FRAME_MAGIC, version=1, coll=0, dtype=8, op=0, root=0, tag=3,
          comm_id=0x123456789ABCDEF0, seq=7, count=1024, nbytes=4096):
    return struct.pack("<IBBBBiIQQQQ", magic, version, coll, dtype, op, root, tag, comm_id, seq,
                       count, nbytes)


def frame_cases():
    want = frame()
    cases = {
        "match": frame() + want,
        "match_why255": frame() + want + bytes([255, 255]),
        "bad_magic": frame(magic=0xDEADBEEF) + want,
        "http_bytes": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".ljust(48, b"\0") + want,
        "other_version": frame(version=2) + want,
        "other_comm": frame(comm_id=0x1111) + want,
        "seq_mismatch": frame(seq=8) + want,
        "coll_mismatch": frame(coll=COLL["broadcast"]) + want,
        "count_mismatch": frame(count=1023) + want,
        "nbytes_huge": frame(nbytes=(1 << 64) - 1) + want,
        "dtype_out_of_range": frame(dtype=200) + frame(dtype=200),
        "op_out_of_range": frame(op=99) + want,
        "coll_out_of_range": frame(coll=250) + frame(coll=250),
        "root_negative": frame(root=-1) + want,
        "tag_mismatch": frame(tag=4) + want,
        "p2p_send": frame(coll=COLL["send"], count=5, nbytes=20) + frame(coll=COLL["send"], count=5, nbytes=20),
        "why0": frame(seq=9) + want + bytes([0, 0]),
        "why1": frame(magic=0) + want + bytes([1, 1]),
        "why10": frame(coll=2) + want + bytes([10, 3]),
        "short": frame()[:10],
        "empty_want": frame(),
    }
    return cases


# ---- fuzz_hello: [rank][ranks above][sockets per peer][connected mask] then 40-byte hellos ----
HELLO_MAGIC = 0x43484857
HELLO_COMM = 0x0BADC0FFEE123457
HELLO_SECRET = bytes(range(1, 17))


def hello(rank, nranks, sock_index=0, magic=HELLO_MAGIC, version=1, comm_id=HELLO_COMM,
          secret=HELLO_SECRET):
    return struct.pack("<IHHiiQ", magic, version, sock_index, rank, nranks, comm_id) + secret


def hello_cases():
    cases = {
        "one_valid": bytes([0, 1, 0, 0]) + hello(1, 2),
        "full_mesh_4socks": bytes([1, 3, 3, 0]) + b"".join(
            hello(r, 5, s) for r in range(2, 5) for s in range(4)),
        "duplicate": bytes([0, 1, 0, 0]) + hello(1, 2) + hello(1, 2),
        "already_connected": bytes([0, 2, 1, 0x05]) + hello(1, 3, 0) + hello(1, 3, 1),
        "bad_magic": bytes([0, 1, 0, 0]) + hello(1, 2, magic=0x12345678),
        "other_version": bytes([0, 1, 0, 0]) + hello(1, 2, version=7),
        "other_comm": bytes([0, 1, 0, 0]) + hello(1, 2, comm_id=1),
        "wrong_secret": bytes([0, 1, 0, 0]) + hello(1, 2, secret=bytes(16)),
        "rank_too_high": bytes([0, 1, 0, 0]) + hello(2, 2),
        "rank_negative": bytes([2, 2, 0, 0]) + hello(-5, 5),
        "rank_own": bytes([2, 2, 0, 0]) + hello(2, 5),
        "rank_lower": bytes([3, 1, 0, 0]) + hello(1, 5),
        "rank_int_max": bytes([0, 1, 0, 0]) + hello(0x7FFFFFFF, 2),
        "nranks_mismatch": bytes([0, 1, 0, 0]) + hello(1, 3),
        "sock_index_eq_nsocks": bytes([0, 1, 1, 0]) + hello(1, 2, 2),
        "sock_index_max": bytes([0, 1, 3, 0]) + hello(1, 2, 0xFFFF),
        "truncated": bytes([0, 1, 0, 0]) + hello(1, 2)[:17],
    }
    return cases


# ---- fuzz_status: [nranks - 2][rank][sender selector][host bits 4 LE, 2 per rank][header 48] ----
STATUS_MAGIC = 0x43485354
ABORT_MAGIC = 0x43484142
STATUS_COMM = 0x5A7E5CA1AB1E0C0D
ASK, SECONDHAND, IN_CALL, GAVE_UP = 0x01000000, 0x02000000, 0x04000000, 0x08000000


def gave_up_nbytes(status, kind=0, stood_ms=0, origin=-1):
    """frame.h's CHORUS_GAVE_UP_NBYTES: -status | kind << 8 | (origin + 1) << 16 | stood_ms << 32."""
    return (-status & 0xFF) | (kind & 0xFF) << 8 | ((origin + 1) & 0xFFFF) << 16 | (stood_ms & 0xFFFFFFFF) << 32
# Host indices of fuzz_status.c's kHosts: "node-a", "node-b", "node-ab" (a longer name with
# node-a's as prefix), and a 63-character name that fills the field.
NODE_A, NODE_B, NODE_AB, NODE_LONG = 0, 1, 2, 3


def status_hdr(subject, flags=0, seq=12, nbytes=11, magic=STATUS_MAGIC, version=1,
               comm_id=STATUS_COMM, coll=0, dtype=8, op=0, root=0, count=1024):
    return frame(magic=magic, version=version, coll=coll, dtype=dtype, op=op, root=root,
                 tag=(subject | flags) & 0xFFFFFFFF, comm_id=comm_id, seq=seq, count=count,
                 nbytes=nbytes)


def status_input(hosts, rank, sender, hdr):
    """hosts: the host index of each rank (len = nranks, 2..16); sender != rank."""
    n = len(hosts)
    assert 2 <= n <= 16 and 0 <= rank < n and 0 <= sender < n and sender != rank
    bits = sum(h << (2 * r) for r, h in enumerate(hosts))
    return bytes([n - 2, rank, (sender - rank - 1) % n]) + struct.pack("<I", bits) + hdr


def status_cases():
    # 4 ranks on two hosts: 0 and 1 on node-a, 2 and 3 on node-b.
    two_hosts = [NODE_A, NODE_A, NODE_B, NODE_B]
    mixed = [NODE_A, NODE_AB, NODE_A, NODE_LONG, NODE_LONG, NODE_B]
    cases = {
        # First hand (the sender about itself).
        "first_in_call": status_input(two_hosts, 0, 2, status_hdr(2, IN_CALL)),
        "first_ask": status_input(two_hosts, 0, 2, status_hdr(2, ASK | IN_CALL)),
        "first_ask_nothing_posted": status_input(two_hosts, 1, 0, status_hdr(0, ASK, seq=0, nbytes=0)),
        "first_idle_all_done": status_input(two_hosts, 3, 1, status_hdr(1, 0, seq=12, nbytes=12)),
        "first_seq_max": status_input(two_hosts, 3, 1, status_hdr(1, 0, seq=2**64 - 1, nbytes=2**64 - 1)),
        "first_done_gt_posted": status_input(two_hosts, 0, 2, status_hdr(2, IN_CALL, seq=12, nbytes=13)),
        "first_about_other": status_input(two_hosts, 0, 2, status_hdr(3)),
        "first_about_me": status_input(two_hosts, 0, 2, status_hdr(0)),
        # Second hand (another rank of the sender's host).
        "second_valid": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND, seq=12, nbytes=0)),
        "second_never_published": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND, seq=0, nbytes=0, count=0)),
        # Second hand, nbytes = milliseconds since the subject's heartbeat moved: a stopped rank.
        "second_stopped_5s": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND, seq=12, nbytes=5000)),
        "second_stopped_age_max": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND, seq=12, nbytes=2**64 - 1)),
        "second_other_host": status_input(two_hosts, 0, 2, status_hdr(1, SECONDHAND, nbytes=0)),
        "second_about_sender": status_input(two_hosts, 0, 2, status_hdr(2, SECONDHAND, nbytes=0)),
        "second_about_me_same_host": status_input(two_hosts, 0, 1, status_hdr(0, SECONDHAND, nbytes=0)),
        "first_same_host_as_me": status_input(two_hosts, 0, 1, status_hdr(1, 0)),
        "second_with_ask": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND | ASK, nbytes=0)),
        "second_with_in_call": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND | IN_CALL, nbytes=0)),
        "second_prefix_host": status_input(mixed, 5, 0, status_hdr(1, SECONDHAND, nbytes=0)),
        "second_prefix_host_same": status_input(mixed, 5, 0, status_hdr(2, SECONDHAND, nbytes=0)),
        "second_long_host": status_input(mixed, 0, 3, status_hdr(4, SECONDHAND, nbytes=0)),
        "second_16_ranks": status_input([NODE_B] * 8 + [NODE_LONG] * 8, 15, 8,
                                        status_hdr(14, SECONDHAND, seq=99, nbytes=0)),
        "second_2_ranks_one_host": status_input([NODE_A, NODE_A], 0, 1, status_hdr(0, SECONDHAND, nbytes=0)),
        # Subject rank and flags.
        "subject_eq_nranks": status_input(two_hosts, 0, 2, status_hdr(4, SECONDHAND, nbytes=0)),
        "subject_mask_max": status_input(two_hosts, 0, 2, status_hdr(0xFFFFFF, SECONDHAND, nbytes=0)),
        "subject_16_first": status_input([NODE_A] * 16, 0, 15, status_hdr(15, IN_CALL)),
        "unknown_flag": status_input(two_hosts, 0, 2, status_hdr(2, 0x10000000)),
        # Give-up frames: the sender about itself, blaming a rank or none, with its status.
        "gave_up_timeout_blames_stuck": status_input(two_hosts, 0, 2, status_hdr(
            2, GAVE_UP, seq=9, root=3, nbytes=gave_up_nbytes(-6, kind=2, stood_ms=3100))),
        "gave_up_remote_no_blame": status_input(two_hosts, 1, 0, status_hdr(0, GAVE_UP, seq=0, root=-1,
                                                                            nbytes=gave_up_nbytes(-5))),
        "gave_up_blames_nranks": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=4,
                                                                          nbytes=gave_up_nbytes(-6, kind=1))),
        "gave_up_root_minus_2": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=-2, nbytes=gave_up_nbytes(-6))),
        "gave_up_status_ok": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=-1, nbytes=0)),
        "gave_up_status_unknown": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=-1, nbytes=12)),
        "gave_up_about_other": status_input(two_hosts, 0, 2, status_hdr(3, GAVE_UP, root=-1, nbytes=gave_up_nbytes(-6))),
        "gave_up_passed_on": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=3,
                                                                      nbytes=gave_up_nbytes(-6, kind=1, origin=1))),
        "gave_up_origin_is_sender": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=-1,
                                                                             nbytes=gave_up_nbytes(-6, origin=2))),
        "gave_up_origin_nranks": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP, root=-1,
                                                                          nbytes=gave_up_nbytes(-6, origin=4))),
        "gave_up_with_in_call": status_input(two_hosts, 0, 2, status_hdr(2, GAVE_UP | IN_CALL, root=-1,
                                                                         nbytes=gave_up_nbytes(-6))),
        "all_flag_bits": status_input(two_hosts, 0, 2, status_hdr(2, 0xFF000000)),
        # Not a status frame of this communicator.
        "data_frame_magic": status_input(two_hosts, 0, 2, status_hdr(2, magic=FRAME_MAGIC)),
        "abort_magic": status_input(two_hosts, 0, 2, status_hdr(2, magic=ABORT_MAGIC)),
        "other_version": status_input(two_hosts, 0, 2, status_hdr(2, version=2)),
        "other_comm": status_input(two_hosts, 0, 2, status_hdr(2, comm_id=0x123456789ABCDEF0)),
        # Short inputs: the rest comes from the valid first-hand status.
        "prefix_only": bytes([2, 0, 1]) + struct.pack("<I", 0x5),
        "truncated_header": status_input(two_hosts, 0, 2, status_hdr(3, SECONDHAND, nbytes=0))[:19],
    }
    return cases


# ---- fuzz_store: records [selector][len 2 LE][bytes]; selector bits 0-1 = client (a selector
# past the last client adds a new one, at the next index), bit 6 = valid hello first ----
STORE_MAGIC = 0x43485354
STORE_SECRET = bytes([0xC5, 0x01, 0x7E, 0x22, 0x90, 0x3B, 0x4F, 0x11,
                      0xA8, 0x66, 0x0D, 0xE2, 0x57, 0x39, 0xBB, 0x04])
SET, GET, ADD, DONE = 1, 2, 3, 4
HELLO_BIT = 0x40


def store_hello(magic=STORE_MAGIC, version=1, secret=STORE_SECRET):
    return struct.pack("<IHH", magic, version, 0) + secret


def req(op, key=b"", arg=0, value=b"", keylen=None):
    keylen = len(key) if keylen is None else keylen
    return struct.pack("<B3xIQ", op, keylen, arg) + key + value


def setv(key, value):
    return req(SET, key, len(value), value)


def rec(client, payload, hello_first=False):
    sel = client | (HELLO_BIT if hello_first else 0)
    return struct.pack("<BH", sel, len(payload)) + payload


def store_cases():
    peer_key = b"0123456789abcdef/peer/0"
    cases = {
        "session_set_get_add_done": rec(0, store_hello() + setv(b"k", b"value") + req(GET, b"k", 1000)
                                        + req(ADD, b"n", 5) + req(ADD, b"n", 2**64 - 1) + req(DONE, b"", 2)),
        "bootstrap_two_ranks": rec(0, setv(peer_key, bytes(136)), True)
                               + rec(1, req(GET, peer_key, 30000), True)
                               + rec(1, req(DONE, b"", 2)) + rec(0, req(DONE, b"", 2)),
        "get_waits_then_woken": rec(0, req(GET, b"late", 60000), True) + rec(1, setv(b"late", b"x"), True)
                                + rec(0, req(GET, b"late", 0)),
        "get_timeout_zero": rec(0, req(GET, b"missing", 0), True),
        "queued_behind_wait": rec(0, req(GET, b"w", 60000) + req(ADD, b"c", 1) * 8, True),
        "split_request": rec(0, setv(b"abc", b"0123456789")[:9], True) + rec(0, setv(b"abc", b"0123456789")[9:]),
        "split_hello": rec(0, store_hello()[:5]) + rec(0, store_hello()[5:] + req(ADD, b"x", 1)),
        "wrong_secret": rec(0, store_hello(secret=bytes(16)) + req(ADD, b"x", 1)),
        "bad_magic": rec(0, store_hello(magic=0x48545450)),
        "other_version": rec(0, store_hello(version=2)),
        "op_zero": rec(0, req(0, b"k"), True),
        "op_five": rec(0, req(5, b"k"), True),
        "keylen_257": rec(0, req(ADD, b"k" * 257), True),
        "keylen_256": rec(0, req(ADD, b"k" * 256, 1), True),
        "keylen_huge_partial": rec(0, req(SET, b"", 4, keylen=0xFFFFFFFF), True),
        "set_value_too_big": rec(0, req(SET, b"k", (1 << 20) + 1), True),
        "set_value_max_partial": rec(0, req(SET, b"k", 1 << 20) + bytes(100), True),
        "add_on_string_value": rec(0, setv(b"v", b"abc") + req(ADD, b"v", 3) + req(GET, b"v", 0), True),
        "key_with_nul": rec(0, setv(b"a\0b", b"1") + req(GET, b"a", 0), True),
        "empty_key": rec(0, setv(b"", b"") + req(GET, b"", 0), True),
        "four_clients": b"".join(rec(c, req(ADD, b"ctr", 1), True) for c in range(4))
                        + rec(3, req(GET, b"ctr", 0)),
        "hello_twice": rec(0, store_hello() + store_hello(), False),
        # Regression seeds of findings (see the fuzz report): an ADD whose sum overflows int64.
        "regress_add_overflow": rec(0, req(ADD, b"n", 2**63 - 1) + req(ADD, b"n", 1), True),
        "raw_hello": store_hello(),
        "raw_set": setv(b"key", b"val"),
    }
    return cases


def write_dir(root, name, cases):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    for fname, data in sorted(cases.items()):
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    print(f"{d}: {len(cases)} seeds")


# ---- fuzz_zeros: [n - 1 as LE u16][wire form] (reduce/codec.h's ZEROS) ----
def zeros_input(n, form):
    return struct.pack("<H", n - 1) + form


def zeros_sparse(n, kept):
    """The sparse form of n elements keeping {index: float}."""
    words = (n + 63) // 64
    bitmap = bytearray(8 * words)
    for i in kept:
        bitmap[i // 8] |= 1 << (i % 8)
    values = b"".join(struct.pack("<f", kept[i]) for i in sorted(kept))
    return struct.pack("<II", 2, len(kept)) + bytes(bitmap) + values


def zeros_dense(values):
    return struct.pack("<II", 1, len(values)) + b"".join(struct.pack("<f", v) for v in values)


def zeros_cases():
    nan = float("nan")
    return {
        "dense_3": zeros_input(3, zeros_dense([0.0, -0.0, 5.0])),
        "dense_wrong_count": zeros_input(3, struct.pack("<II", 1, 4) + bytes(12)),
        "sparse_130": zeros_input(130, zeros_sparse(130, {i: float(i) for i in range(3, 130, 10)})),
        "sparse_one_of_64": zeros_input(64, zeros_sparse(64, {63: -0.0})),
        "sparse_nan": zeros_input(100, zeros_sparse(100, {0: nan, 99: 1e38})),
        "sparse_none_kept": zeros_input(2048, zeros_sparse(2048, {})),
        "sparse_count_off": zeros_input(130, struct.pack("<II", 2, 14) + zeros_sparse(130, {i: 1.0 for i in range(0, 130, 10)})[8:]),
        "sparse_bit_past_n": zeros_input(65, struct.pack("<II", 2, 1) + bytes([0] * 8) + bytes([2, 0, 0, 0, 0, 0, 0, 0]) + struct.pack("<f", 1.0)),
        "sparse_not_shorter": zeros_input(2, struct.pack("<II", 2, 2) + bytes([3, 0, 0, 0, 0, 0, 0, 0]) + bytes(8)),
        "unknown_form": zeros_input(4, struct.pack("<II", 3, 4) + bytes(16)),
        "head_only": zeros_input(10, struct.pack("<II", 2, 0)),
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    write_dir(root, "frame", frame_cases())
    write_dir(root, "hello", hello_cases())
    write_dir(root, "status", status_cases())
    write_dir(root, "store", store_cases())
    write_dir(root, "zeros", zeros_cases())


if __name__ == "__main__":
    main()
