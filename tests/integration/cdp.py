"""Headless Chromium for the dashboard's tests, driven over the DevTools
protocol on --remote-debugging-pipe: JSON messages, each ended by a NUL
byte, written to the browser's fd 3 and read from its fd 4. No
WebDriver, no network port of its own.

    from cdp import Browser
    with Browser(chromium, profile_dir) as b:
        b.open(url)
        b.wait_for("document.title === 'dagrun'", "the page")
        b.js("document.getElementById('x').click()")
"""
import json
import os
import subprocess
import sys
import time


class Browser:
    def __init__(self, chromium, profile):
        self.profile = profile
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=open(profile + ".err", "w"))
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.session = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()

    def send(self, method, params=None, deadline=30, errors=False):
        """One protocol call; its result, or exit naming the error (with
        errors, the error object is returned as {"error": ...})."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + deadline
        while time.time() < end:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("id") == self._id:
                    if "error" in m:
                        if errors:
                            return {"error": m["error"]}
                        sys.exit(f"{method}: {m['error']}")
                    return m["result"]
            chunk = os.read(self._from_r, 65536)
            if not chunk:
                sys.exit("chromium closed the pipe")
            self._buf += chunk
        sys.exit(f"{method}: no answer")

    def open(self, url):
        """A new tab on url, attached to."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def js(self, expr):
        """expr evaluated in the page (promises awaited), by value."""
        # A page that reloads (location.reload(), a navigation) drops the
        # evaluation under way: asked again once the new page is there.
        for _ in range(100):
            r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                               "awaitPromise": True}, errors=True)
            if "error" not in r:
                return r["result"].get("value")
            msg = str(r["error"].get("message", ""))
            if "navigated" not in msg and "context" not in msg.lower():
                sys.exit(f"Runtime.evaluate: {r['error']}")
            time.sleep(0.1)
        sys.exit(f"Runtime.evaluate: the page kept navigating: {r['error']}")

    def wait_for(self, expr, what, secs=20):
        """Polls expr until it is truthy; exits naming what and showing the
        page's text when it never is."""
        end = time.time() + secs
        while time.time() < end:
            if self.js(expr):
                return
            time.sleep(0.1)
        sys.exit(f"not seen in {secs}s: {what}\n--- page:\n" + str(self.js("document.body.innerText")))

    def type_text(self, element_id, text, enter=False):
        """Focuses the element and types text as key input (not a value set
        by script), then Enter when asked."""
        self.js(f"document.getElementById({json.dumps(element_id)}).value = ''")
        self.js(f"document.getElementById({json.dumps(element_id)}).focus()")
        self.send("Input.insertText", {"text": text})
        if enter:
            for kind in ("keyDown", "keyUp"):
                self.send("Input.dispatchKeyEvent",
                          {"type": kind, "key": "Enter", "code": "Enter",
                           "windowsVirtualKeyCode": 13,
                           **({"text": "\r"} if kind == "keyDown" else {})})

    def click(self, selector):
        """Clicks the element selector names, as a user would: a mouse press
        and release at its centre."""
        box = self.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: 'center'}});
            const r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if not box:
            sys.exit(f"click: nothing matches {selector}\n--- page:\n" + str(self.js("document.body.innerText")))
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1],
                                                   "button": "left", "clickCount": 1})
