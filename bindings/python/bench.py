# SPDX-License-Identifier: BSD-2-Clause
"""Lookup through procreg beside a dict lookup of the same names.

    PROCREG_BUILD_DIR=build python3 bindings/python/bench.py [--names N] [--rounds R]

Starts a private procregd (from PROCREG_BUILD_DIR) in a temporary
directory, registers N names (10^4) with 24 bytes of metadata each, and
times, round after round, one pass of hits over all the names through:
a bare loop (subtracted from the others), a dict's d[name] and d.get(name)
(the dict maps each name to a tuple), `name in reg` (the call and the
library's lookup, no result built), reg.lookup(name) (the same plus the
Entry) and reg.lookup_many() of 64 names a call. Prints ns per lookup: median of the rounds, and min-max.
A benchmark, not a test: on a shared machine the figures move.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import procreg


def start_daemon():
    build = os.environ.get("PROCREG_BUILD_DIR")
    if not build:
        sys.exit("bench.py: set PROCREG_BUILD_DIR to the build tree with procregd")
    d = tempfile.mkdtemp(prefix="procreg-bench.")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCREG_")}
    proc = subprocess.Popen([os.path.join(build, "procregd"), "--foreground", "--dir", d,
                             "--scope", "bench"], stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 20
    while True:
        try:
            reg = procreg.Registry("bench", dir=d)
            reg.sync()
            return proc, d, reg
        except procreg.Error:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench.py: procregd did not start")
            time.sleep(0.01)


def timed(fn, names, count):
    t0 = time.perf_counter_ns()
    fn(names)
    return (time.perf_counter_ns() - t0) / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--names", type=int, default=10**4)
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()

    proc, d, reg = start_daemon()
    try:
        names = ["svc.%06d.example" % i for i in range(args.names)]
        table = {}
        for n in names:
            meta = ("unix:/run/%s" % n[4:10]).ljust(24).encode()
            reg.register(n, meta)
            table[n] = (os.getpid(), meta)
        # Every name once in another order than they were made, as both
        # the dict and the table would be probed by a real caller.
        names = names[1::2] + names[0::2]
        lookup, get, many = reg.lookup, table.get, reg.lookup_many
        batches = [names[i:i + 64] for i in range(0, len(names), 64)]

        def bare(ns):
            for n in ns:
                pass

        def dict_sub(ns):
            for n in ns:
                table[n]

        def dict_get(ns):
            for n in ns:
                get(n)

        def contains(ns):
            for n in ns:
                n in reg

        def binding(ns):
            for n in ns:
                lookup(n)

        def binding_many(bs):
            for b in bs:
                many(b)

        assert all(lookup(n).metadata == table[n][1] for n in names)
        kinds = [("loop", bare), ("dict[name]", dict_sub), ("dict.get(name)", dict_get),
                 ("name in reg", contains), ("reg.lookup(name)", binding)]
        # Per name, with the loop over the batches only.
        many_kind = ("reg.lookup_many/64", binding_many)
        rounds = {k: [] for k, _ in kinds}
        rounds[many_kind[0]] = []
        for fn in (f for _, f in kinds):
            fn(names)  # warm up: each thread's first read claims its slot
        for _ in range(args.rounds):
            for k, fn in kinds:
                rounds[k].append(timed(fn, names, len(names)))
            rounds[many_kind[0]].append(timed(many_kind[1], batches, len(names)))
        loop = sorted(rounds["loop"])[len(rounds["loop"]) // 2]
        print("python %s, %d names, %d rounds; ns per lookup, the bare loop's %.1f ns "
              "subtracted: median (min-max)" % (sys.version.split()[0], len(names),
                                                args.rounds, loop))
        med = {}
        for k, _ in kinds[1:] + [many_kind]:
            r = sorted(x - loop * (k != many_kind[0]) for x in rounds[k])
            med[k] = r[len(r) // 2]
            print("  %-18s %7.1f  (%.1f-%.1f)" % (k, med[k], r[0], r[-1]))
        print("  reg.lookup / dict[name]     %.2fx" % (med["reg.lookup(name)"] / med["dict[name]"]))
        print("  reg.lookup / dict.get(name) %.2fx" %
              (med["reg.lookup(name)"] / med["dict.get(name)"]))
    finally:
        reg.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
