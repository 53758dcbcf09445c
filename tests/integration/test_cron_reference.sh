# Cron fire times against an independent brute-force reference
# (tests/reference/cron_ref.py: every UTC minute through Python's zoneinfo)
# for random expressions around the DST transitions of America/New_York,
# Europe/Berlin and Australia/Lord_Howe.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c 'import zoneinfo; zoneinfo.ZoneInfo("Europe/Berlin")' 2>/dev/null ||
  { echo "skip: no Python zoneinfo"; pass; exit 0; }
$PY "$DAGRUN_SOURCE_DIR/tests/reference/cron_ref.py" "$DAGRUN" 1 120 >"$T/ref.out" 2>&1 ||
  fail "dagrun cron-next disagrees with the reference:
$(cat "$T/ref.out")"
expect_in "$T/ref.out" "cases 120 mismatches 0"
pass
