"""The other process of test_engine's exchange: an Engine whose exported buffer holds a pattern.
Prints its segment name and the buffer's address, waits for a line on stdin (the peer has read
the pattern and written the second half), then prints the second half's bytes as hex."""

import sys

import yuebing

SIZE = 1 << 20

engine = yuebing.Engine()
buf = engine.allocate(SIZE, remote="rw")
buf.write(bytes(i % 251 for i in range(SIZE)))
print(engine.name, buf.addr, flush=True)
sys.stdin.readline()
print(buf.read(SIZE // 2, 64).hex(), flush=True)
sys.stdin.readline()
