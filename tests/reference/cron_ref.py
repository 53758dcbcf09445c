"""
Brute-force reference for cron fire times and the DST policy of
orchestrator/base/cron.h, independent of the C code: walks every UTC minute with
Python's zoneinfo (the same tz database, a different reader) and compares
the fire times with `dagrun cron-next` for random expressions around the
DST transitions of New York, Berlin and Lord Howe (a 30-minute shift).

Usage: cron_ref.py DAGRUN SEED CASES. Exit 1 on any mismatch.

The policy as the reference states it: a minute u fires when its local
time matches, except the second pass (fold=1) of a fall-back repeat for a
job whose minute and hour fields do not start with '*'; and at the first
instant after a spring-forward, if any local minute of the gap matches.
"""
import random, subprocess, sys
from datetime import datetime, timezone, timedelta
from zoneinfo import ZoneInfo

B = sys.argv[1]
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)

def field(lo, hi, star_hi):
    kind = rng.random()
    if kind < 0.3:
        return '*', set(range(lo, star_hi + 1))
    if kind < 0.45:
        st = rng.randint(1, 6)
        return '*/%d' % st, set(range(lo, star_hi + 1, st))
    items = []; vals = set()
    for _ in range(rng.randint(1, 3)):
        a = rng.randint(lo, hi)
        if rng.random() < 0.4:
            b = rng.randint(a, hi)
            if rng.random() < 0.5:
                st = rng.randint(1, 4); items.append('%d-%d/%d' % (a, b, st)); vals |= set(range(a, b + 1, st))
            else:
                items.append('%d-%d' % (a, b)); vals |= set(range(a, b + 1))
        else:
            items.append(str(a)); vals.add(a)
    return ','.join(items), vals

def gen():
    mi = field(0, 59, 59)
    if rng.random() < 0.5:
        mi = (str(rng.choice([0, 15, 30, 45])), None); mi = (mi[0], {int(mi[0])})
    h = field(0, 4, 23) if rng.random() < 0.8 else field(0, 23, 23)
    dom = field(1, 31, 31) if rng.random() < 0.3 else ('*', set(range(1, 32)))
    mon = ('*', set(range(1, 13)))
    dow = field(0, 6, 6) if rng.random() < 0.3 else ('*', set(range(0, 7)))
    return [mi, h, dom, mon, dow]

def matches(f, dt):
    (zm, m), (zh, h), (zd, d), (zmo, mo), (zw, w) = f
    wd = (dt.weekday() + 1) % 7
    if dt.minute not in m or dt.hour not in h or dt.month not in mo:
        return False
    dm, wm = dt.day in d, wd in w
    if zd.startswith('*') or zw.startswith('*'):
        return dm and wm
    return dm or wm

def ref(f, zone, start, n):
    z = ZoneInfo(zone)
    fixed = not f[0][0].startswith('*') and not f[1][0].startswith('*')
    out = []
    u = start
    while len(out) < n:
        u += timedelta(minutes=1)
        loc = u.astimezone(z)
        prev = (u - timedelta(minutes=1)).astimezone(z)
        fire = False
        off, poff = loc.utcoffset(), prev.utcoffset()
        if off > poff:  # gap local times [u+poff, u+off)
            t = (u + poff).replace(tzinfo=None)
            while t < (u + off).replace(tzinfo=None):
                if matches(f, t): fire = True
                t += timedelta(minutes=1)
        if matches(f, loc) and not (fixed and loc.fold == 1):
            fire = True
        if fire:
            out.append(u.strftime('%Y-%m-%dT%H:%M:%SZ'))
    return out

bad = 0
# The transitions (UTC); each case starts up to 26 hours before one.
cases = [('America/New_York', '2026-03-08T07:00:00'), ('America/New_York', '2026-11-01T06:00:00'),
         ('Europe/Berlin', '2026-03-29T01:00:00'), ('Europe/Berlin', '2026-10-25T01:00:00'),
         ('Australia/Lord_Howe', '2026-04-04T15:00:00'), ('Australia/Lord_Howe', '2026-10-03T15:30:00')]
for i in range(int(sys.argv[3]) if len(sys.argv) > 3 else 200):
    f = gen()
    expr = ' '.join(x[0] for x in f)
    zone, tr = rng.choice(cases)
    start = (datetime.fromisoformat(tr).replace(tzinfo=timezone.utc) -
             timedelta(minutes=rng.randint(0, 26 * 60)))
    st = start.strftime('%Y-%m-%dT%H:%M:%S')
    want = ref(f, zone, start, 30)
    r = subprocess.run([B, 'cron-next', expr, '--tz', zone, '--from', st + 'Z', '-n', '30'],
                       capture_output=True, text=True)
    got = [l.split('(')[1].rstrip(')') for l in r.stdout.splitlines()]
    # --from includes a fire at start; the reference starts after it
    if got and got[0] == start.strftime('%Y-%m-%dT%H:%M:%SZ'):
        got = got[1:]; want = want[:len(got)]
    else:
        got = got[:len(want)]
    if got != want:
        bad += 1
        if bad < 6:
            print('MISMATCH', repr(expr), zone, st)
            for a, b in zip(want, got):
                print('  ', a, b, '' if a == b else '<--')
print("cases", i + 1, "mismatches", bad)
sys.exit(1 if bad else 0)
