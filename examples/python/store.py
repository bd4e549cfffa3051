"""The store from Python: put and get three objects, read one into your own memory without a
copy, remove them. The same small task as examples/{async,blocking,callback}_store.rs and
examples/c/store.c.

    yuebing master --port 50051 &
    yuebing node --master 127.0.0.1:50051 --store-size 256M &
    python examples/python/store.py --master 127.0.0.1:50051
"""

import argparse

import numpy as np

import yuebing


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="127.0.0.1:50051", help="the master's host:port")
    args = ap.parse_args()

    with yuebing.Store(args.master) as store:
        values = {f"example/py/{i}": bytes([i]) * (1000 * (i + 1)) for i in range(3)}
        for key, value in values.items():
            store.put(key, value)
        for key, value in values.items():
            assert store.get(key) == value, key
        try:
            store.put("example/py/0", b"again")
        except yuebing.ObjectAlreadyExists as e:
            print(f"put of an existing key: {e.name} ({e.code})")

        # Zero-copy into a numpy array (any writable buffer, or an int address and a size).
        dst = np.zeros(4096, dtype=np.uint8)
        n = store.get_into("example/py/1", dst)
        assert bytes(dst[:n]) == values["example/py/1"]
        print(f"get_into read {n} bytes into a numpy array")

        for key in values:
            store.remove(key, force=True)  # force: the reads above hold leases
        assert not any(store.batch_exist(list(values)))
        print("ok: 3 objects put, read, read into memory, removed")


if __name__ == "__main__":
    main()
