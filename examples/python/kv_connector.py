"""A KV-connector flow through Mooncake's API (run here on yuebing through yuebing-mooncake):
a "prefill" process registers one large KV buffer and stores each layer's block with one
batch_put_from; a "decode" process registers its own buffer and loads the blocks with one
batch_get_into, zero-copy both ways. This is what vLLM's and LMCache's Mooncake connectors do.

    yuebing master --port 50051 &
    yuebing node --master 127.0.0.1:50051 --store-size 256M &
    python examples/python/kv_connector.py --master 127.0.0.1:50051
"""

import argparse
import multiprocessing as mp

import numpy as np

LAYERS, BLOCK = 32, 64 << 10          # 32 layers, one 64 KiB block each


def store(master):
    from mooncake.store import MooncakeDistributedStore
    st = MooncakeDistributedStore()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master)
    assert rc == 0, f"setup: {rc}"
    return st


def keys(request):
    return [f"{request}/layer{layer}/block0" for layer in range(LAYERS)]


def prefill(master, request, done):
    st = store(master)
    kv = np.empty(LAYERS * BLOCK, dtype=np.uint8)          # the engine's KV cache
    for layer in range(LAYERS):
        kv[layer * BLOCK:(layer + 1) * BLOCK] = layer
    base = kv.ctypes.data
    assert st.register_buffer(base, kv.nbytes) == 0
    rcs = st.batch_put_from(keys(request), [base + layer * BLOCK for layer in range(LAYERS)],
                            [BLOCK] * LAYERS)
    assert rcs == [0] * LAYERS, rcs
    st.unregister_buffer(base)
    st.close()
    done.set()


def decode(master, request, done, result):
    done.wait(60)
    st = store(master)
    kv = np.zeros(LAYERS * BLOCK, dtype=np.uint8)
    base = kv.ctypes.data
    assert st.register_buffer(base, kv.nbytes) == 0
    got = st.batch_get_into(keys(request), [base + layer * BLOCK for layer in range(LAYERS)],
                            [BLOCK] * LAYERS)
    ok = got == [BLOCK] * LAYERS and all(
        (kv[layer * BLOCK:(layer + 1) * BLOCK] == layer).all() for layer in range(LAYERS))
    st.batch_remove(keys(request), True)
    st.unregister_buffer(base)
    st.close()
    result.put(ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="127.0.0.1:50051")
    ap.add_argument("--request", default="req-0001")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")          # a fresh process: no store inherited through fork
    done, result = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=prefill, args=(args.master, args.request, done)),
             ctx.Process(target=decode, args=(args.master, args.request, done, result))]
    for p in procs:
        p.start()
    ok = result.get(timeout=120)
    for p in procs:
        p.join(60)
    assert ok and all(p.exitcode == 0 for p in procs), "the decode side got other bytes"
    print(f"ok: {LAYERS} layer blocks of {BLOCK >> 10} KiB moved from prefill to decode")


if __name__ == "__main__":
    main()
