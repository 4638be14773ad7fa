#!/usr/bin/env python3
"""Writes the seed corpora (valid and edge-case inputs) of the fuzz targets. Run from anywhere; the files are
committed, so this only needs running again when the formats change. Files named regress-* are inputs that
once found a defect and are kept by hand, not written here."""
import os, struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
SECRET = bytes([0x5e, 0xc7, 0x3e, 0x70]) + bytes(range(1, 13))  # fuzz_frame.c's secret
MAGIC = 0x464E4F44


def put(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def addr(family, port, a):
    return bytes([family, 0]) + struct.pack(">H", port) + a.ljust(16, b"\0")


def uid(family=4, port=29500, a=bytes([127, 0, 0, 1]), magic=b"DION", version=1):
    b = magic + bytes([version, 0, 0, 0]) + addr(family, port, a) + bytes(range(16)) + struct.pack("<Q", 0x1234)
    return b.ljust(128, b"\0")


def frame(ftype, payload, magic=MAGIC, length=None):
    return struct.pack("<III", magic, ftype, len(payload) if length is None else length) + payload


# ---- uid: raw ids and DION_UNIQUE_ID text ----
put("uid", "v4", uid())
put("uid", "v6", uid(6, 65535, bytes(15) + b"\1"))
put("uid", "port0", uid(port=0))
put("uid", "family5", uid(family=5))
put("uid", "bad-magic", uid(magic=b"NOID"))
put("uid", "version2", uid(version=2))
put("uid", "hex-lower", uid().hex())
put("uid", "hex-upper", uid(6, 1, b"\xfe\x80" + bytes(14)).hex().upper())
put("uid", "hex-short", uid().hex()[:-1])
put("uid", "hex-nonhex", uid().hex()[:-2] + "zz")
put("uid", "empty", b"")

# ---- frame: mode 0 (stream, cap), 1 (HELLO), 2 (ring: n, rank, op, root, bytes, flags, stream) ----
def stream(cap, body):
    return b"\0" + struct.pack("<I", cap) + body

put("frame", "stream-data", stream(64, frame(4, b"hello") + frame(4, b"")))
put("frame", "stream-all-types", stream(100, b"".join(frame(t, bytes(12)) for t in range(1, 6))))
put("frame", "stream-over-cap", stream(4, frame(4, b"12345")))
put("frame", "stream-bad-magic", stream(64, frame(4, b"x", magic=0x12345678)))
put("frame", "stream-bad-type", stream(64, frame(9, b"x")))
put("frame", "stream-huge-len", stream(64, frame(4, b"", length=0xFFFFFFFF)))
put("frame", "stream-max-len", stream(64, frame(4, b"", length=1 << 20)))
put("frame", "stream-truncated", stream(64, frame(4, b"abcdef")[:-3]))

# HELLO payload: nonce (16), rank, nranks, ring address (20), tag (8); mode byte, then flags (bit 0: a length byte)
NONCE = bytes(range(100, 116))
hello = NONCE + struct.pack("<II", 2, 4) + addr(4, 4000, bytes([10, 0, 0, 2])) + bytes(8)
put("frame", "hello-valid", b"\1\0" + hello)
put("frame", "hello-any-addr-v6", b"\1\0" + NONCE + struct.pack("<II", 0, 1) + addr(6, 1, b"") + bytes(8))
put("frame", "hello-rank-out-of-range", b"\1\0" + NONCE + struct.pack("<II", 4, 4) + hello[24:])
put("frame", "hello-too-many-ranks", b"\1\0" + NONCE + struct.pack("<II", 0, (1 << 22) + 1) + hello[24:])
put("frame", "hello-port0", b"\1\0" + hello[:24] + addr(4, 0, b"\1\2\3\4") + bytes(8))
put("frame", "hello-family5", b"\1\0" + hello[:24] + addr(5, 9, b"\1\2\3\4") + bytes(8))
put("frame", "hello-short", b"\1\1\x30" + hello)
put("frame", "hello-long", b"\1\1\x35" + hello + b"xyz")


def ring(n, rank, op, root, nbytes, flags, body):
    return bytes([2, n - 2, rank, op, root, nbytes, flags]) + body


blk = lambda i, k: bytes((i * 7 + j) & 0xFF for j in range(k))
put("frame", "ring-allgather-3", ring(3, 1, 0, 0, 8, 0, frame(4, blk(0, 8)) + frame(4, blk(2, 8))))
put("frame", "ring-allgather-split", ring(2, 0, 0, 0, 10, 0, frame(4, blk(1, 4)) + frame(4, blk(1, 10)[4:])))
put("frame", "ring-allgather-zero", ring(4, 3, 0, 0, 0, 0, frame(4, b"") * 3))
put("frame", "ring-allgather-abort", ring(3, 2, 0, 0, 8, 0, frame(5, struct.pack("<III", 1, 9, 0))))
put("frame", "ring-allgather-abort-self", ring(3, 2, 0, 0, 8, 0, frame(5, struct.pack("<III", 7, 0, 2))))
put("frame", "ring-allgather-overlong", ring(2, 0, 0, 0, 4, 0, frame(4, blk(1, 6))))
put("frame", "ring-allgather-empty-early", ring(2, 0, 0, 0, 4, 0, frame(4, b"")))
put("frame", "ring-allgather-eof", ring(2, 1, 0, 0, 16, 0, frame(4, blk(0, 16))[:20]))
put("frame", "ring-bcast", ring(3, 1, 1, 0, 12, 0, frame(4, blk(5, 12))))
put("frame", "ring-bcast-root", ring(3, 0, 1, 0, 12, 0, b""))
put("frame", "ring-bcast-last", ring(3, 2, 1, 0, 5, 0, frame(4, blk(5, 5))))
put("frame", "ring-barrier", ring(5, 2, 2, 0, 0, 0, frame(4, b"") * 4))
put("frame", "ring-barrier-hello", ring(2, 1, 2, 0, 0, 0, frame(1, hello)))
put("frame", "ring-challenge", ring(2, 1, 2, 0, 0, 0, frame(6, NONCE)))
put("frame", "ring-abort-requested", ring(3, 1, 2, 0, 0, 1, b"\2" + frame(4, b"") * 2))

# ---- fdpass: nranks-2, rank, local mask, same-pid mask, tag, round; then datagrams (kind, ...) ----
def fd_input(nranks, rank, local, same, tag, dgrams, rnd=0):
    return bytes([nranks - 2, rank, local, same, tag, rnd]) + b"".join(dgrams)

ok = lambda frm, nfds=1, extra=0, *more: bytes([0x80 | extra | nfds, frm] + list(more))  # encoded, right key
put("fdpass", "two-ranks", fd_input(2, 0, 0xFF, 0xFF, 1, [ok(1)]))
put("fdpass", "four-ranks", fd_input(4, 2, 0xFF, 0xFF, 3, [ok(0), ok(1), ok(3)]))
put("fdpass", "no-fd", fd_input(3, 0, 0xFF, 0xFF, 0, [ok(1, 0), ok(2, 0)]))
put("fdpass", "duplicate", fd_input(3, 0, 0xFF, 0xFF, 0, [ok(1), ok(1)]))
put("fdpass", "from-self", fd_input(3, 1, 0xFF, 0xFF, 0, [ok(1)]))
put("fdpass", "remote-rank", fd_input(3, 0, 0x01, 0xFF, 0, [ok(2)]))
put("fdpass", "other-pid", fd_input(3, 0, 0xFF, 0x01, 0, [ok(1)]))
put("fdpass", "wrong-key", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 1, 0x04)]))
put("fdpass", "wrong-round", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 1, 0x08, 2)]))
put("fdpass", "wrong-tag", fd_input(2, 0, 0xFF, 0xFF, 2, [ok(1, 1, 0x20, 1)]))
put("fdpass", "wrong-to", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 1, 0x40, 1)]))
put("fdpass", "announces-two", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 2, 0x10, 2)]))
put("fdpass", "fd-count-mismatch", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 0, 0x10, 1)]))
put("fdpass", "two-fds", fd_input(2, 0, 0xFF, 0xFF, 0, [ok(1, 2)]))
put("fdpass", "short-payload", fd_input(2, 0, 0xFF, 0xFF, 0, [bytes([0x01 | (5 << 2)]) + b"DFD1\1"]))
put("fdpass", "empty-payload", fd_input(2, 0, 0xFF, 0xFF, 0, [b"\x03"]))
# Found on 8613763: a rejected datagram carrying three descriptors leaked two of them.
put("fdpass", "regress-rejected-message-with-three-fds", fd_input(3, 1, 1, 0xD6, 1, [bytes([0x27]) + bytes(9)]))

# ---- env: NAME=VALUE lines ----
envs = {
    "dion-rank": "DION_RANK=1\nDION_NRANKS=4\nDION_ROOT=127.0.0.1:29500\nDION_SECRET=s3cret\n",
    "dion-rank0-root": "DION_RANK=0\nDION_NRANKS=2\nDION_ROOT=127.0.0.1:0\n",
    "dion-v6-root": "DION_RANK=1\nDION_NRANKS=2\nDION_ROOT=[::1]:4000\n",
    "dion-rank-only": "DION_RANK=0\n",
    "dion-rank-out-of-range": "DION_RANK=4\nDION_NRANKS=4\nDION_ROOT=1.2.3.4:5\n",
    "dion-too-many": "DION_RANK=0\nDION_NRANKS=4194305\n",
    "dion-unique-id": "DION_RANK=0\nDION_NRANKS=2\nDION_UNIQUE_ID=" + uid().hex() + "\n",
    "dion-unique-id-bad": "DION_RANK=0\nDION_NRANKS=2\nDION_UNIQUE_ID=" + uid().hex()[:-4] + "\n",
    "ompi-single-node": "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_SIZE=2\nPMIX_NAMESPACE=job.1\n",
    "ompi-reader": "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_SIZE=2\nOMPI_MCA_ess_base_jobid=77\n",
    "ompi-multi-node": "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=8\nOMPI_COMM_WORLD_LOCAL_SIZE=4\nPMIX_NAMESPACE=x\n",
    "slurm": "SLURM_PROCID=0\nSLURM_NTASKS=4\nSLURM_NNODES=1\nSLURM_JOB_ID=123\nSLURM_STEP_ID=4\n",
    "torchrun": "RANK=1\nWORLD_SIZE=2\nMASTER_ADDR=10.1.2.3\nMASTER_PORT=29500\nTORCHELASTIC_RUN_ID=r\n",
    "torchrun-v6": "RANK=1\nWORLD_SIZE=2\nMASTER_ADDR=fe80::1\nMASTER_PORT=65535\nDION_ROOT_PORT_OFFSET=-65535\n",
    "torchrun-no-port": "RANK=0\nWORLD_SIZE=2\nMASTER_ADDR=10.0.0.1\n",
    "half-set": "WORLD_SIZE=3\n",
    "durations": "DION_WAIT_TIMEOUT=500ms\nDION_WATCHDOG_INTERVAL=1.5e3us\nDION_BOOTSTRAP_TIMEOUT=2m\n",
    "duration-edges": "DION_WAIT_TIMEOUT=nan\nDION_WATCHDOG_INTERVAL=1e400h\nDION_BOOTSTRAP_TIMEOUT=-0\n",
    "duration-huge": "DION_WAIT_TIMEOUT=5000000000h\nDION_WATCHDOG_INTERVAL=0x10s\n",
    "bools": "DION_CHECK=yes\nDION_STATS=Off\nDION_CPU_MODE=2\n",
    "enums": "DION_LOG=TRACE\nDION_TRANSPORT=p2p|auto\n",
    "ints": "DION_DEVICE= 7 \nDION_LOCAL_RANK=99999999999999999999\nDION_RANK=-0\nDION_NRANKS=+3\n",
    "strings": "DION_BOOTSTRAP_IFNAME=eth0\nDION_SECRET==\nCUDA_VISIBLE_DEVICES=0,1\n",
}
for k, v in envs.items():
    put("env", k, v)

# ---- root: connections (count-1), then per connection: flags (1 whole HELLO frame with the right proof,
# 2 split, 4 half-close), length, bytes (a HELLO frame's payload: nonce, rank, nranks, address, tag)
def hello_frame(rank, n, a):
    return frame(1, NONCE + struct.pack("<II", rank, n) + a + bytes(8))


def root_input(conns):
    out = bytes([len(conns) - 1])
    for flags, b in conns:
        out += bytes([flags, len(b)]) + b
    return out

lo = lambda port: addr(4, port, bytes([127, 0, 0, 1]))
put("root", "job-2", root_input([(1, hello_frame(0, 2, lo(5000))), (1, hello_frame(1, 2, addr(4, 6000, b"\x0a\0\0\2")))]))
put("root", "job-3-split-any", root_input([(3, hello_frame(i, 3, addr(4, 7000 + i, b""))) for i in (2, 0, 1)]))
put("root", "job-1", root_input([(5, hello_frame(0, 1, addr(6, 1, bytes(15) + b"\1")))]))
put("root", "duplicate-rank", root_input([(1, hello_frame(0, 2, lo(1))), (1, hello_frame(0, 2, lo(2))), (1, hello_frame(1, 2, lo(3)))]))
put("root", "nranks-differ", root_input([(1, hello_frame(0, 2, lo(1))), (1, hello_frame(1, 3, lo(2)))]))
put("root", "wrong-proof", root_input([(0, hello_frame(0, 1, lo(1)))]))
put("root", "short-then-close", root_input([(4, hello_frame(0, 2, lo(1))[:30]), (1, hello_frame(1, 2, lo(2)))]))
put("root", "not-hello", root_input([(0, frame(3, bytes(28))), (0, frame(4, b"x" * 52))]))
put("root", "garbage", root_input([(4, b"GET / HTTP/1.0\r\n\r\n"), (0, b"")]))
put("root", "forced-zeros", root_input([(1, bytes(64)), (3, bytes(40))]))
put("root", "port0", root_input([(1, hello_frame(0, 1, lo(0)))]))
put("root", "six", root_input([(1 | 2 * (i & 1), hello_frame(i, 6, lo(9000 + i))) for i in range(6)]))
