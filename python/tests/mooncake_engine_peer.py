"""The other process of test_mooncake_engine's exchange, written against Mooncake's API only: a
TransferEngine with a managed buffer holding a pattern. Prints its segment name and the
buffer's address, waits for a line on stdin (the peer has read the pattern and written the
second half, with a notification), then prints the second half's first 64 bytes as hex and
the notifications received."""

import sys

from mooncake.engine import TransferEngine

SIZE = 1 << 20

te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
addr = te.allocate_managed_buffer(SIZE)
assert addr != 0
assert te.write_bytes_to_buffer(addr, bytes(i % 251 for i in range(SIZE)), SIZE) == 0
print(f"127.0.0.1:{te.get_rpc_port()}", addr, flush=True)
sys.stdin.readline()
print(te.read_bytes_from_buffer(addr + SIZE // 2, 64).hex(), flush=True)
print(";".join(f"{n.name}={n.msg}" for n in te.get_notifies()), flush=True)
sys.stdin.readline()
assert te.free_managed_buffer(addr, SIZE) == 0
