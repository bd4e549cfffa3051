"""The Transfer Engine from Python: one engine exports a buffer, another writes into it and
reads it back, one-sided, by segment name (both in this process here; across processes the
name and address travel however you like).

    python examples/python/transfer.py
"""

import numpy as np

import yuebing


def main():
    target, initiator = yuebing.Engine(), yuebing.Engine()
    exported = target.allocate(1 << 20, remote="rw")   # peers may read and write it

    segment = initiator.open_segment(target.name)      # the name is the engine's host:port
    src = np.arange(1 << 20, dtype=np.uint32).view(np.uint8)[: 1 << 20]
    initiator.write(src, segment, exported.addr)       # any buffer, or an int address + length
    back = np.zeros_like(src)
    initiator.read(back, segment, exported.addr)
    assert np.array_equal(back, src)

    # A batch: four 256 KiB reads, waited for together.
    mine = initiator.allocate(1 << 20)
    batch = initiator.allocate_batch(4)
    quarter = 1 << 18
    initiator.submit(batch, [("read", mine.addr + i * quarter, segment,
                              exported.addr + i * quarter, quarter) for i in range(4)])
    status = initiator.wait(batch)
    initiator.free_batch(batch)
    assert status.state == "completed" and mine.read() == src.tobytes()
    print(f"ok: wrote and read 1 MiB of {target.name}, then a batch of {status.tasks} reads")


if __name__ == "__main__":
    main()
