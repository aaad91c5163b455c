"""A raw client of the data service's control socket (data_service/ring/control_protocol.h),
for tests/isolation_service_test.sh. Each subcommand connects to SOCKET, does one thing
and exits 0 when the service answered as it must, else prints what went wrong and exits 1.

  register SOCKET JOB RANK [--hold]  a valid registration: kRegistered naming
                                     /stoker.JOB.ring.RANK, the segment mode 0600; then a
                                     StartEpoch answered with kEpochStarted
  taken SOCKET JOB RANK              a registration whose segment another service of job JOB
                                     holds: refused with AlreadyExists naming the segment
  other-user SOCKET UID              as UID (needs root): refused with PermissionDenied
  malformed SOCKET                   a 16-byte packet: kError InvalidArgument, then closed
  oversized SOCKET                   a 64 KiB packet: kError InvalidArgument, then closed
  length-prefix SOCKET               an 8-byte length prefix of 2^62 before a valid message
  bad-fields SOCKET                  a message of the right size with a bad magic, version,
                                     type, boolean or unterminated text, one per connection
  flood SOCKET N                     N connections that each send garbage and vanish
"""
import os
import socket
import stat
import struct
import sys
import time

MESSAGE = struct.Struct("<IHHIiiiiiiBB2xqQqqQi4x256s")
assert MESSAGE.size == 344
MAGIC, VERSION = 0x4C435453, 3
REGISTER, REGISTERED, START_EPOCH, EPOCH_STARTED, ERROR = 1, 2, 3, 4, 5
INVALID_ARGUMENT, ALREADY_EXISTS, PERMISSION_DENIED = 3, 6, 7
TIMEOUT_S = 20


def fail(text):
    print(f"FAIL: {text}")
    sys.exit(1)


def pack(kind, request_id=1, rank=0, world=2, batch=8, image=16, slots=2, train=1, epoch=0,
         seed=0, text=b"", magic=MAGIC, version=VERSION, drop_last=0):
    return MESSAGE.pack(magic, version, kind, request_id, 0, rank, world, batch, image, slots,
                        train, drop_last, epoch, seed, 0, 0, 0, 0, text.ljust(256, b"\0")[:256])


def unpack(packet):
    if len(packet) != MESSAGE.size:
        fail(f"the service sent a packet of {len(packet)} bytes; a message is {MESSAGE.size}")
    f = MESSAGE.unpack(packet)
    return {"magic": f[0], "version": f[1], "type": f[2], "request_id": f[3], "status": f[4],
            "text": f[18].split(b"\0", 1)[0].decode(errors="replace")}


def connect(path):
    """Connects, retrying while the listen backlog is full (EAGAIN), for TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(TIMEOUT_S)
        try:
            s.connect(path)
            return s
        except BlockingIOError:
            s.close()
            if time.monotonic() > deadline:
                fail(f"the service accepted no connection on {path} within {TIMEOUT_S} s")
            time.sleep(0.01)


def receive(s):
    try:
        packet = s.recv(4096)
    except socket.timeout:
        fail(f"no reply within {TIMEOUT_S} s")
    if not packet:
        return None
    return unpack(packet)


def expect_error(s, code, words, what):
    reply = receive(s)
    if reply is None:
        fail(f"{what}: the connection was closed without an error reply")
    if reply["type"] != ERROR or reply["status"] != code:
        fail(f"{what}: expected kError with status {code}, got {reply}")
    for word in words:
        if word not in reply["text"]:
            fail(f"{what}: the error '{reply['text']}' does not say '{word}'")
    print(f"{what}: refused with status {code}: {reply['text']}")
    return reply


def expect_closed(s, what):
    try:
        rest = s.recv(4096)
    except socket.timeout:
        fail(f"{what}: the service kept the connection open")
    except ConnectionResetError:
        rest = b""
    if rest:
        fail(f"{what}: expected the connection closed, got {len(rest)} more bytes")
    print(f"{what}: connection closed by the service")


def register(path, job, rank, hold):
    s = connect(path)
    s.send(pack(REGISTER, request_id=7, rank=int(rank)))
    reply = receive(s)
    if reply is None or reply["type"] != REGISTERED or reply["request_id"] != 7:
        fail(f"registration: expected kRegistered for request 7, got {reply}")
    expected = f"/stoker.{job}.ring.{rank}"
    if reply["text"] != expected:
        fail(f"registration: segment {reply['text']}, expected {expected}")
    mode = stat.S_IMODE(os.stat("/dev/shm" + reply["text"]).st_mode)
    if mode != 0o600:
        fail(f"segment /dev/shm{reply['text']} has mode {mode:o}, not 600")
    print(f"registered: segment /dev/shm{reply['text']} mode {mode:o}")
    s.send(pack(START_EPOCH, request_id=8, epoch=0, seed=3))
    reply = receive(s)
    if reply is None or reply["type"] != EPOCH_STARTED or reply["request_id"] != 8:
        fail(f"StartEpoch: expected kEpochStarted for request 8, got {reply}")
    print("epoch started")
    if hold:
        print("holding the connection; close stdin to end", flush=True)
        sys.stdin.read()
    s.close()


def other_user(path, uid):
    uid = int(uid)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        except PermissionError:
            os._exit(77)
        s = connect(path)
        s.send(pack(REGISTER, request_id=5))
        expect_error(s, PERMISSION_DENIED, ["may not use", f"uid {uid}"], f"uid {uid}")
        expect_closed(s, f"uid {uid}")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 77:
        print(f"SKIP: cannot switch to uid {uid} here")
        sys.exit(77)
    if code != 0:
        sys.exit(1)


def raw(path, packet, words, what):
    s = connect(path)
    s.send(packet)
    expect_error(s, INVALID_ARGUMENT, words, what)
    expect_closed(s, what)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    command, path, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if command == "register":
        register(path, args[0], args[1], "--hold" in args)
    elif command == "taken":
        s = connect(path)
        s.send(pack(REGISTER, rank=int(args[1])))
        expect_error(s, ALREADY_EXISTS, [f"/stoker.{args[0]}.ring.{args[1]}"], "segment taken")
        s.close()
    elif command == "other-user":
        other_user(path, args[0])
    elif command == "malformed":
        raw(path, b"not a message at", ["control packet of 16 bytes"], "16-byte packet")
    elif command == "oversized":
        raw(path, pack(REGISTER) + b"\xff" * (65536 - MESSAGE.size), ["control packet of 65536 bytes"],
            "64 KiB packet")
    elif command == "length-prefix":
        raw(path, struct.pack("<Q", 1 << 62) + pack(REGISTER), ["control packet of 352 bytes"],
            "length prefix 2^62")
    elif command == "bad-fields":
        cases = [
            (pack(REGISTER, magic=0x12345678), "bad magic"),
            (pack(REGISTER, version=9), "version 9"),
            (pack(77), "unknown type 77"),
            (pack(REGISTER, train=2), "boolean"),
            (pack(ERROR, text=b"x" * 256), "not NUL-terminated"),
        ]
        for packet, words in cases:
            raw(path, packet, [words], words)
        # Well-formed but not a request, and requests out of range: refused, and the
        # wrong type closes the connection.
        s = connect(path)
        s.send(pack(REGISTERED))
        expect_error(s, INVALID_ARGUMENT, ["unexpected control message type 2"], "a reply type")
        expect_closed(s, "a reply type")
        s = connect(path)
        s.send(pack(REGISTER, rank=5, world=2))
        expect_error(s, INVALID_ARGUMENT, ["rank"], "rank 5 of 2")
        s.send(pack(REGISTER, batch=-1))
        expect_error(s, INVALID_ARGUMENT, ["batch_size"], "batch_size -1")
        s.send(pack(REGISTER, image=1 << 30))
        expect_error(s, INVALID_ARGUMENT, ["image_size"], "image_size 2^30")
        s.close()
    elif command == "flood":
        for _ in range(int(args[0])):
            s = connect(path)
            s.send(os.urandom(100))
            s.close()
        print(f"{args[0]} connections sent garbage and closed")
    else:
        fail(f"unknown command {command}")


if __name__ == "__main__":
    main()
