"""SIGTERM while the main thread holds the lock that stopping takes: pika's wake_threadsafe
holds a non-reentrant lock, and a signal handler runs in the main thread between two bytecodes,
so a handler that stops the sidecar itself deadlocked there (``rtroute run`` hung on SIGTERM in
CI; py-spy showed ``on_signal -> Sidecar.stop -> add_callback_threadsafe -> wake_threadsafe``
inside ``wake_threadsafe``). No broker: a stand-in sidecar takes such a lock in ``stop``."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import os, signal, threading
from rtroute.sidecar.service import serve

class Sidecar:
    """run() sends itself SIGTERM while holding the lock stop() takes, as pika's loop does."""
    def __init__(self):
        self.lock = threading.Lock()
        self.stopped = threading.Event()
    def http_routes(self):
        return {}
    def status(self):
        return {"healthy": True}
    def stop(self):
        with self.lock:
            self.stopped.set()
    def run(self):
        with self.lock:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between these bytecodes
                pass
        assert self.stopped.wait(10), "stop() never ran"
        print("stopped")

serve(Sidecar(), None)
'''


def test_sigterm_while_the_stop_lock_is_held_does_not_hang():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
