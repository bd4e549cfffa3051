"""No thread waits for the GIL while it holds a lock of the binding: an error raised by a
registration call (whose exception is made by Python code, which may hand the GIL to another
thread) is made only once the registration table's lock is released, so a second thread that
takes the GIL and then wants that lock never waits for a thread that waits for the GIL.

Run in a process of its own with a watchdog: a deadlock holds the GIL, so nothing in the process
but faulthandler's own thread could report it."""

from __future__ import annotations

import subprocess
import sys

DEADLOCK = """
import faulthandler, sys, threading
import yuebing
faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)   # a hang: traceback, exit 1
sys.setswitchinterval(1e-6)                  # hand the GIL over at nearly every bytecode
e = yuebing.Engine()
mem = bytearray(1 << 16)
rounds = int(sys.argv[2])
failed = []

def unregister_what_is_not_registered():
    for _ in range(rounds):
        try:
            e.unregister(4096)               # raises AddressNotRegistered
        except yuebing.AddressNotRegistered:
            pass
        else:
            failed.append("not refused")

def register_and_unregister():
    for _ in range(rounds):
        e.register(mem)
        e.unregister(mem)

def take_and_release_call_pins():
    src = bytes(64)
    own = e.open_segment(e.name)
    buf = e.allocate(64)
    for _ in range(rounds):
        e.write(src, own, buf.addr)          # `src` registered for the call

threads = [threading.Thread(target=f) for f in (
    unregister_what_is_not_registered, register_and_unregister, take_and_release_call_pins)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not failed, failed
print("ok")
"""


def test_an_error_under_the_registration_lock_never_deadlocks_with_the_gil():
    # Before: unregister made its AddressNotRegistered exception under the table's lock; the
    # other threads took the GIL meanwhile and blocked on that lock: a hang, every run.
    out = subprocess.run([sys.executable, "-c", DEADLOCK, "90", "3000"],
                         capture_output=True, text=True, timeout=240)
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), (
        f"exit status {out.returncode} (1 with a traceback: a hang): {out.stderr[-4000:]}")
