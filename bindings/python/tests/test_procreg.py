# SPDX-License-Identifier: BSD-2-Clause
import asyncio
import errno
import os
import re
import selectors
import subprocess
import sys
import threading
import time

import pytest

import procreg

HOLDER = """
import sys, procreg
with procreg.Registry() as reg:
    for arg in sys.argv[1:]:
        kind, name = arg.split("=", 1)
        if kind == "name":
            reg.register(name, b"held by the child")
        else:
            reg.join(name, b"child member")
    print("ready", flush=True)
    sys.stdin.read()
"""


class Holder:
    """Another process holding names and memberships, until stopped."""

    def __init__(self, daemon, *args):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, *args], env=daemon.env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "ready\n"

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def test_lookup_hit_and_miss(reg):
    assert reg.lookup("svc.payments") is None
    assert "svc.payments" not in reg
    before = time.time_ns()
    assert reg.register("svc.payments", b"unix:/run/payments.sock") is True
    name = "svc.payments"
    e = reg.lookup(name)
    assert isinstance(e, procreg.Entry)
    assert e.name is name
    assert e.pid == os.getpid()
    assert e.node == 0
    assert e.uid == os.getuid()
    assert e.flags == 0
    assert e.metadata == b"unix:/run/payments.sock"
    assert before - 10**9 <= e.registered_ns <= time.time_ns() + 10**9
    with open("/proc/self/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    assert e.start_time == start
    assert "svc.payments" in reg
    assert "pid=%d" % os.getpid() in repr(e)


def test_metadata_kinds(reg):
    reg.register("m.str", "unix:/tmp/é")
    assert reg.lookup("m.str").metadata == "unix:/tmp/é".encode()
    reg.register("m.none")
    assert reg.lookup("m.none").metadata == b""
    reg.register("m.view", memoryview(b"\x00\xff" * 512))
    assert reg.lookup("m.view").metadata == b"\x00\xff" * 512
    with pytest.raises(procreg.InvalidArgument) as ei:
        reg.register("m.big", b"x" * (procreg.META_MAX + 1))
    assert ei.value.errno == errno.EMSGSIZE


def test_bytes_names_round_trip(reg):
    raw = b"caf\xc3\xa9.\xff"
    reg.register(raw, b"1")
    assert reg.lookup(raw).name is raw
    listed = [e.name for e in reg.entries()]
    assert listed == [os.fsdecode(raw)] or listed == [raw.decode("utf-8", "surrogateescape")]
    # A name the library gave back, passed back, is the same name.
    assert reg.lookup(listed[0]).metadata == b"1"


def test_invalid_names(reg):
    for name, code in (("", errno.EINVAL), ("a\0b", errno.EINVAL),
                       ("n" * (procreg.NAME_MAX + 1), errno.ENAMETOOLONG)):
        with pytest.raises(procreg.InvalidArgument) as ei:
            reg.register(name)
        assert ei.value.errno == code
        assert isinstance(ei.value, ValueError)
    with pytest.raises(TypeError):
        reg.lookup(42)
    reg.register("n" * procreg.NAME_MAX)
    assert reg.lookup("n" * procreg.NAME_MAX).pid == os.getpid()


def test_lookup_many(reg):
    names = ["svc.many.%03d" % i for i in range(100)]  # more than one library call
    for i, n in enumerate(names):
        if i % 3 != 2:  # the others stay unregistered
            reg.register(n, b"x" * procreg.META_MAX if i % 10 == 1 else b"" if i % 10 == 0 else n)
    raw = b"caf\xc3\xa9.\xff"
    reg.register(raw, b"raw")
    names.append(raw)
    got = reg.lookup_many(names)
    assert isinstance(got, list) and len(got) == len(names)
    for n, e in zip(names, got):
        one = reg.lookup(n)
        if one is None:
            assert e is None
            continue
        assert e.name is n
        assert (e.pid, e.node, e.uid, e.flags, e.metadata, e.start_time, e.registered_ns) == \
            (one.pid, one.node, one.uid, one.flags, one.metadata, one.start_time, one.registered_ns)
    assert sum(e is not None for e in got) == 68
    # Any iterable of names.
    assert [e.metadata for e in reg.lookup_many(tuple(names[:2]))] == [b"", b"x" * procreg.META_MAX]
    assert [e and e.metadata for e in reg.lookup_many(n for n in names[2:4])] == [None, names[3].encode()]
    assert reg.lookup_many([]) == []
    for bad, exc in (("", procreg.InvalidArgument), ("a\0b", procreg.InvalidArgument),
                     ("n" * (procreg.NAME_MAX + 1), procreg.InvalidArgument), (42, TypeError)):
        with pytest.raises(exc):
            reg.lookup_many(names[:40] + [bad])
    with pytest.raises(TypeError):
        reg.lookup_many(42)


def test_taken_by_another_process_and_death(daemon, reg):
    h = Holder(daemon, "name=svc.taken")
    try:
        e = reg.lookup("svc.taken")
        assert e.pid == h.proc.pid and e.metadata == b"held by the child"
        with pytest.raises(procreg.NameTaken) as ei:
            reg.register("svc.taken", b"mine")
        assert ei.value.errno == errno.EEXIST
        assert isinstance(ei.value, FileExistsError) and isinstance(ei.value, procreg.Error)
        assert ei.value.filename == "svc.taken"
        with pytest.raises(procreg.PermissionDenied):
            reg.update("svc.taken", b"mine")
        # In line behind the owner, and the owner once it dies.
        assert reg.register("svc.taken", b"next", queue=True) is False
    finally:
        h.kill()
    reg.sync()
    e = reg.lookup("svc.taken")
    assert e is not None and e.pid == os.getpid() and e.metadata == b"next"


def test_unregister_and_update(reg):
    with pytest.raises(procreg.NotFound) as ei:
        reg.unregister("svc.absent")
    assert ei.value.errno == errno.ENOENT and isinstance(ei.value, FileNotFoundError)
    with pytest.raises(procreg.NotFound):
        reg.update("svc.absent", b"x")
    reg.register("svc.u", b"v1")
    reg.update("svc.u", b"v2")
    assert reg.lookup("svc.u").metadata == b"v2"
    reg.unregister("svc.u")
    assert reg.lookup("svc.u") is None


def test_groups(daemon, reg):
    h = Holder(daemon, "group=workers")
    try:
        reg.join("workers", b"me")
        reg.join("cache", b"c")
        members = sorted(reg.members("workers"), key=lambda e: e.pid)
        assert [(m.pid, m.metadata) for m in members] == sorted(
            [(os.getpid(), b"me"), (h.proc.pid, b"child member")])
        assert all(m.name == "workers" for m in members)
        groups = {g.name: (g.members, g.local_members) for g in reg.groups()}
        assert groups == {"workers": (2, 2), "cache": (1, 1)}
        reg.leave("cache")
        with pytest.raises(procreg.NotFound):
            reg.leave("cache")
        assert reg.members("cache") == []
        assert reg.wait_group("workers", 2, timeout=0) is True
        assert reg.wait_group("workers", 3, timeout=0.05) is False
    finally:
        h.kill()
    reg.sync()
    assert [m.pid for m in reg.members("workers")] == [os.getpid()]


def test_wait_releases_the_gil(reg):
    assert reg.wait("svc.late", timeout=0.05) is False
    # The registering thread runs only while wait() has let the GIL go.
    t = threading.Timer(0.1, reg.register, ("svc.late", b"here"))
    t.start()
    assert reg.wait("svc.late", timeout=30) is True
    t.join()
    assert reg.wait("svc.late", timeout=0) is True
    assert reg.lookup("svc.late").metadata == b"here"


def test_close_refused_while_another_thread_waits(daemon, reg):
    # close() is either refused, while the other thread is inside wait(),
    # or made before it got there, and then its wait() finds the handle
    # closed: never both, so try until the first case is met.
    for attempt in range(100):
        r, result = daemon.open(), []

        def waiter():
            try:
                result.append(r.wait("svc.never", 60))
            except ValueError:
                result.append("closed")

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.01)
        try:
            r.close()
        except RuntimeError:
            assert not r.closed
            reg.register("svc.never")
            t.join()
            assert result == [True]
            r.close()
            assert r.closed
            return
        t.join()
        assert result == ["closed"]
    assert False, "the waiting thread never got inside wait()"


def test_watch_iterator(reg):
    w = reg.watch()
    assert w.next(timeout=0) is None
    reg.register("svc.w", b"1")
    reg.update("svc.w", b"2")
    reg.join("g.w")
    reg.unregister("svc.w")
    got = [next(w), next(w), next(w), next(w)]
    assert [(ev.type, ev.name, ev.is_group) for ev in got] == [
        (procreg.EV_REGISTERED, "svc.w", False), (procreg.EV_UPDATED, "svc.w", False),
        (procreg.EV_JOINED, "g.w", True), (procreg.EV_UNREGISTERED, "svc.w", False)]
    assert all(ev.pid == os.getpid() for ev in got)
    assert [ev.seq for ev in got] == list(range(got[0].seq, got[0].seq + 4))
    assert w.cursor == got[-1].seq
    assert w.next(timeout=0.01) is None


def test_watch_selectors(reg):
    with reg.watch() as w, selectors.DefaultSelector() as sel:
        sel.register(w.fileno(), selectors.EVENT_READ)
        assert sel.select(timeout=0) == [] or w.drain() == []
        reg.register("svc.sel")
        assert sel.select(timeout=30)
        events = w.drain()
        assert [(ev.type, ev.name) for ev in events] == [(procreg.EV_REGISTERED, "svc.sel")]


def test_watch_asyncio(daemon, reg):
    async def main():
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()
        with reg.watch() as w:
            loop.add_reader(w.fileno(), lambda: [queue.put_nowait(ev) for ev in w.drain()])
            try:
                await loop.run_in_executor(None, Holder(daemon, "name=svc.async").kill)
                first = await asyncio.wait_for(queue.get(), 30)
                second = await asyncio.wait_for(queue.get(), 30)
            finally:
                loop.remove_reader(w.fileno())
        return first, second

    first, second = asyncio.run(main())
    assert (first.type, first.name) == (procreg.EV_REGISTERED, "svc.async")
    assert (second.type, second.name) == (procreg.EV_DIED, "svc.async")
    assert second.pid == first.pid != os.getpid()


def test_closed_registry(daemon):
    with daemon.open() as r:
        assert not r.closed
        w = r.watch()
    assert r.closed
    with pytest.raises(ValueError):
        r.lookup("x")
    with pytest.raises(ValueError):
        w.next(timeout=0)
    r.close()


def test_no_such_scope(daemon):
    with pytest.raises(procreg.NotFound) as ei:
        procreg.Registry("nosuchscope", dir=daemon.dir)
    assert ei.value.errno == errno.ENOENT


def test_readme_example(daemon):
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")
    with open(readme) as f:
        m = re.search(r"<!-- example-python -->\n```python\n(.*?)```\n<!-- /example-python -->",
                      f.read(), re.S)
    assert m, "README.md: no Python example between <!-- example-python --> markers"
    out = subprocess.run([sys.executable, "-c", m.group(1)], env=daemon.env(), check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert re.fullmatch(r"example.payments: pid (\d+) at unix:/run/payments.sock\ngone: True\n",
                        out), out
