"""The polling baseline's worker in Python, for the idle rows of bridge-bench.

The reference bridge (a Python daemon) is single-threaded and sleeps with
time.sleep between polls, so when idle it wakes about once a poll; the Go
worker in baseline.go pays the Go runtime's own wake-ups around each tick.
This worker is written for the harness after the reference's described
behaviour (see baseline.go), so the idle rows can stand beside a process
that idles as the reference does:

  at start: replay the journal (the terminal state of every id, the results
            of idempotency keys), settle in-flight markers, archive queue
            files that are already answered;
  each tick: list queue/*.json sorted by name, run every file, sleep the
            poll interval.

It also runs requests (the same request, result and journal formats as the
Go worker), so that the harness can check it serves after its idle window.

Usage: python3 baseline_worker.py ROOT POLL_SECONDS TOKEN
It prints "pid N" and "ready 1" and serves until SIGTERM or SIGINT.
"""

import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SAFE = re.compile(r"scripts/[A-Za-z0-9_/.-]+\.(sh|py)")


class Worker:
    def __init__(self, root, token):
        self.root = Path(root)
        self.token = token
        self.queue = self.root / "queue"
        self.results = self.root / "results"
        self.processed = self.root / "processed"
        self.inflight = self.root / "inflight"
        self.progress = self.root / "progress"
        self.scripts = self.root / "scripts"
        self.journal_path = self.root / "journal.log"
        self.terminal = {}
        self.idem = {}

    def journal(self, **event):
        line = json.dumps({"ts": time.time(), **event}) + "\n"
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def replay(self):
        keys = {}
        try:
            f = self.journal_path.open()
        except FileNotFoundError:
            return
        with f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                eid, kind = ev.get("id"), ev.get("event")
                if not eid or not kind:
                    continue
                if kind == "received" and ev.get("idempotency_key"):
                    keys[eid] = ev["idempotency_key"]
                elif kind == "completed":
                    self.terminal[eid] = kind
                    k = keys.get(eid)
                    if k and k not in self.idem:
                        self.idem[k] = ev.get("result") or {}
                elif kind in ("crashed_inflight", "idempotency_hit"):
                    self.terminal[eid] = kind

    def write_result(self, eid, res):
        res.setdefault("id", eid)
        res.setdefault("ts_completed", time.time())
        out = self.results / (eid + ".json")
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(res))
        tmp.rename(out)

    def archive(self, p):
        p.rename(self.processed / p.name)

    def recover(self):
        for m in sorted(self.inflight.glob("*.running")):
            eid = m.name[: -len(".running")]
            if self.terminal.get(eid) != "completed":
                self.write_result(eid, {"exit_code": -4, "error": "crashed mid-execution"})
                self.journal(id=eid, event="crashed_inflight")
            m.unlink(missing_ok=True)
            q = self.queue / (eid + ".json")
            if q.exists():
                self.archive(q)
        for q in sorted(self.queue.glob("*.json")):
            if self.terminal.get(q.stem):
                self.archive(q)

    def reject(self, p, eid, why):
        self.write_result(eid, {"exit_code": -1, "error": why})
        self.archive(p)

    def run_one(self, p):
        eid = p.stem
        try:
            if p.stat().st_size > 1 << 20:
                return self.reject(p, eid, "command file too large")
            req = json.loads(p.read_text())
        except (OSError, ValueError):
            p.unlink(missing_ok=True)
            return
        tok = req.get("token")
        if not isinstance(tok, str) or not hmac.compare_digest(tok, self.token):
            return self.reject(p, eid, "bridge token mismatch")
        key = req.get("idempotency_key")
        self.journal(id=eid, event="received", idempotency_key=key, script=req.get("script"))
        if key and key in self.idem:
            self.write_result(eid, dict(self.idem[key], idempotent_replay=True))
            self.journal(id=eid, event="idempotency_hit", key=key)
            self.terminal[eid] = "idempotency_hit"
            return self.archive(p)
        script = req.get("script", "")
        if not SAFE.fullmatch(script):
            return self.reject(p, eid, "script path not allowed")
        full = (self.scripts / script[len("scripts/"):]).resolve()
        if not str(full).startswith(str(self.scripts.resolve()) + os.sep) or not full.exists():
            return self.reject(p, eid, "script does not exist or escapes")
        args = [str(a) for a in req.get("args") or []]
        argv = ["bash", str(full), *args] if script.endswith(".sh") else [sys.executable, str(full), *args]
        timeout = min(max(int(req.get("timeout", 60)), 1), 600)

        marker = self.inflight / (eid + ".running")
        tmp = marker.with_name(marker.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps({"id": eid, "pid": os.getpid(), "started_ts": time.time(), "cmd": req}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.rename(marker)
        self.journal(id=eid, event="started", pid=os.getpid())

        progress = self.progress / (eid + ".log")
        res = self.run_teed(argv, timeout, progress)
        self.write_result(eid, res)
        self.journal(id=eid, event="completed", result=res)
        self.terminal[eid] = "completed"
        if key:
            self.idem.setdefault(key, res)
        marker.unlink(missing_ok=True)
        progress.unlink(missing_ok=True)
        self.archive(p)

    def run_teed(self, argv, timeout, progress):
        # The output is captured and each line also appended to the progress
        # file, opened per line, by one thread per stream.
        progress.write_text("")
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, cwd=self.root, bufsize=1)
        except OSError as e:
            return {"exit_code": -3, "error": str(e)}
        bufs = {"out": [], "err": []}

        def tee(stream, kind):
            for line in iter(stream.readline, ""):
                bufs[kind].append(line)
                with progress.open("a") as pf:
                    pf.write(line if kind == "out" else "[stderr] " + line)
            stream.close()

        threads = [threading.Thread(target=tee, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=tee, args=(proc.stderr, "err"), daemon=True)]
        for t in threads:
            t.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return {"exit_code": -2, "error": "timeout", "stdout": "".join(bufs["out"]), "stderr": "".join(bufs["err"])}
        for t in threads:
            t.join(timeout=5)
        return {"exit_code": proc.returncode, "stdout": "".join(bufs["out"]), "stderr": "".join(bufs["err"])}


def main():
    root, poll, token = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    w = Worker(root, token)
    for d in (w.queue, w.results, w.processed, w.inflight, w.progress, w.scripts):
        d.mkdir(parents=True, exist_ok=True)
    w.replay()
    w.recover()

    # SIGTERM ends the worker at once, even in its sleep.
    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("version", ".".join(map(str, sys.version_info[:3])), flush=True)
    print("pid", os.getpid(), flush=True)
    print("ready 1", flush=True)
    while True:
        for p in sorted(w.queue.glob("*.json")):
            w.run_one(p)
        time.sleep(poll)


if __name__ == "__main__":
    main()
