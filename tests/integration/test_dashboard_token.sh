# The dashboard's read-token banner, typed into: headless Chromium driven
# over the DevTools protocol (--remote-debugging-pipe) opens the
# dashboard of a serve that wants a read token, types a wrong token and
# Enter (the banner stays, no DAG shows), then the right one (the DAGs
# show, the banner goes, the token is this tab's: kept in sessionStorage
# and as the dagrun_token cookie), and reloads (still shown, not asked).
# test_serve_attacks.sh checks the banner appears; this one that it works.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
printf 'dag: quick\ntasks:\n  a: {stage: exec, with: {command: [true]}}\n' >dags/quick.yaml
openssl rand -hex 32 >rtoken
chmod 600 rtoken
serve_start --no-cron --read-token-file rtoken

cat >token_check.py <<'P'
import sys, time
chromium, cdp_dir, profile, url, good = sys.argv[1:6]
sys.path.insert(0, cdp_dir)
from cdp import Browser

DAGS = "[...document.querySelectorAll('.name')].map(e => e.textContent).join(' ')"
FORM = "!!document.getElementById('read-token-form')"
with Browser(chromium, profile) as b:
    b.open(url)
    b.wait_for(FORM, "the read-token form")
    assert "quick" not in b.js(DAGS), "a DAG showed before any token"

    b.type_text("read-token", "not-the-token-0123456789abcdef", enter=True)
    b.wait_for("sessionStorage.getItem('dagrun-token') === 'not-the-token-0123456789abcdef'",
               "the wrong token kept")
    time.sleep(1.5)  # a poll or two answered 401
    assert b.js(FORM), "the banner went away after a wrong token"
    assert "quick" not in b.js(DAGS), "a DAG showed after a wrong token"

    b.type_text("read-token", good, enter=True)
    b.wait_for(f"({DAGS}).includes('quick')", "the DAG list after the right token")
    b.wait_for(f"!{FORM}", "the banner gone")
    assert b.js("sessionStorage.getItem('dagrun-token')") == good, "token not kept for the tab"
    assert f"dagrun_token={good}" in b.js("document.cookie"), "no dagrun_token cookie"

    b.send("Page.reload")
    time.sleep(0.5)
    b.wait_for(f"({DAGS}).includes('quick')", "the DAG list after a reload")
    assert not b.js(FORM), "asked again after a reload"
    print("dashboard token entry: ok")
P
good=$(tr -d '\n' <rtoken)
browser_check "dashboard token entry" token_check.py "http://127.0.0.1:$PORT/" "$good"
serve_stop
pass
