#!/usr/bin/env python3
"""A fixed delay on one direction of a benchmark link: reads IP packets from a TUN device and
writes them back into it DELAY_MS later, in order. The kernel here has no netem (and no fq for
BPF departure times), and without a round trip of some milliseconds a loopback link is unlike any
player's: TCP windows stay tiny and no flow ever builds the queue that a delay-based sender such
as the discretionary sync watches.

    python3 Benchmarks/delayline.py TUN DELAY_MS

The TUN device must exist (`ip tuntap add dev TUN mode tun`); policy routing sends one
direction's packets into it, and the kernel forwards what comes back out as usual.
"""
import collections
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def main() -> None:
    name, delay = sys.argv[1], float(sys.argv[2]) / 1000
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    held: collections.deque = collections.deque()
    while True:
        now = time.monotonic()
        while held and held[0][0] <= now:
            try:
                os.write(fd, held.popleft()[1])
            except OSError:
                pass  # a packet the kernel refuses is a packet lost, as on a real link
        timeout = max(0.0, held[0][0] - now) if held else None
        if select.select([fd], [], [], timeout)[0]:
            due = time.monotonic() + delay
            while True:
                try:
                    held.append((due, os.read(fd, 65536)))
                except BlockingIOError:
                    break


if __name__ == "__main__":
    main()
