# SPDX-License-Identifier: BSD-2-Clause
"""A private procregd for each test: its own directory and scope, never
the host's registry. PROCREG_BUILD_DIR names the CMake build tree whose
procregd runs."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import procreg


def procregd_path():
    build = os.environ.get("PROCREG_BUILD_DIR")
    if not build:
        raise RuntimeError("PROCREG_BUILD_DIR is not set: it names the build tree with procregd")
    return os.path.join(build, "procregd")


class Daemon:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="procreg-py.")
        self.scope = "pytest"
        self.log = open(os.path.join(self.dir, "procregd.log"), "w")
        env = dict(os.environ)
        for k in ("PROCREG_DIR", "PROCREG_SCOPE", "PROCREG_SOCKET"):
            env.pop(k, None)
        self.proc = subprocess.Popen(
            [procregd_path(), "--foreground", "--dir", self.dir, "--scope", self.scope],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env)
        deadline = time.monotonic() + 20
        while True:
            try:
                with self.open() as reg:
                    reg.sync()
                return
            except (procreg.NotFound, ConnectionError, procreg.Error):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("procregd did not start: " + self.read_log())
                time.sleep(0.005)

    def open(self):
        return procreg.Registry(self.scope, dir=self.dir)

    def env(self):
        env = dict(os.environ, PROCREG_DIR=self.dir, PROCREG_SCOPE=self.scope,
                   PROCREG_NO_AUTOSTART="1")
        env.pop("PROCREG_SOCKET", None)
        return env

    def read_log(self):
        with open(os.path.join(self.dir, "procregd.log")) as f:
            return f.read()

    def stop(self):
        status = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            status = self.proc.wait(timeout=20)
        self.log.close()
        log = self.read_log()
        shutil.rmtree(self.dir)
        return status, log


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    status, log = d.stop()
    assert status == 0, "procregd exited %r:\n%s" % (status, log)


@pytest.fixture
def reg(daemon):
    with daemon.open() as r:
        yield r
