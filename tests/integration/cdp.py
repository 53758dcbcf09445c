"""Headless Chromium for the dashboard's tests, driven over the DevTools
protocol (--remote-debugging-pipe): JSON messages, each ended by a NUL
byte, written to its fd 3 and read from its fd 4.

    with Browser(chromium, profile_dir) as b:
        b.open(url)
        b.wait_for("!!document.querySelector('button')", "a button")
        b.js("document.querySelector('button').click()")
"""
import json, os, subprocess, sys, time


class Browser:
    def __init__(self, chromium, profile):
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self._proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=open(profile + ".err", "w"))
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self._session = None

    def __enter__(self):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget",
                                  {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        return self

    def __exit__(self, *exc):
        self._proc.kill()
        self._proc.wait()

    def send(self, method, params=None, deadline=30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self._session and not method.startswith("Target."):
            msg["sessionId"] = self._session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + deadline
        while time.time() < end:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("id") == self._id:
                    if "error" in m:
                        sys.exit(f"{method}: {m['error']}")
                    return m["result"]
            chunk = os.read(self._from_r, 65536)
            if not chunk:
                sys.exit("chromium closed the pipe")
            self._buf += chunk
        sys.exit(f"{method}: no answer")

    def open(self, url):
        self.send("Page.navigate", {"url": url})

    def js(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        return r["result"].get("value")

    def wait_for(self, expr, what, secs=20, debug="document.body.innerText"):
        end = time.time() + secs
        while time.time() < end:
            if self.js(expr):
                return
            time.sleep(0.1)
        sys.exit(f"not seen in {secs}s: {what}\n--- page:\n" +
                 str(self.js(debug)))
