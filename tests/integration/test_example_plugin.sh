# The out-of-tree example, both ways docs/writing-a-stage.md gives: built
# against the build tree's dagrun-plugin.pc (no install) and run by the
# build tree's dagrun; then dagrun installed into a prefix, the example
# built against the installed .pc and run by the installed dagrun.
# Each time exactly as the doc says: cc + pkg-config, the DAG naming the
# plugin by path.
. "$(dirname "$0")/lib.sh"
: "${DAGRUN_BUILD_DIR:?}"
ex="$DAGRUN_SOURCE_DIR/examples/hello-stage"

# 1. Before any install: PKG_CONFIG_PATH=build/lib/pkgconfig.
[ -f "$DAGRUN_BUILD_DIR/lib/pkgconfig/dagrun-plugin.pc" ] ||
  fail "no build-tree dagrun-plugin.pc in $DAGRUN_BUILD_DIR/lib/pkgconfig"
mkdir build-tree && cd build-tree
cp -r "$ex" hello-stage && cd hello-stage
cflags=$(PKG_CONFIG_PATH="$DAGRUN_BUILD_DIR/lib/pkgconfig" pkg-config --cflags dagrun-plugin) ||
  fail "pkg-config does not find the build tree's dagrun-plugin"
inc=$(printf '%s\n' $cflags | sed -n 's/^-I//p' | head -n 1)
[ -f "$inc/dagrun/plugin.h" ] || fail "the build tree's .pc names $inc, which has no dagrun/plugin.h"
cc -shared -fPIC $cflags -o hello.so hello.c || fail "the example does not build against the build tree"
exports=$(nm -D --defined-only hello.so | awk '$2 == "T" {print $3}')
[ "$exports" = dagrun_stage_entry ] || fail "hello.so (build tree) exports: $exports"
unset DAGRUN_PLUGIN_PATH
run_dagrun run hello.yaml --plain
expect_rc 0
greeting=$(find "$(run_dir hello)" -name greeting.txt | head -n 1)
[ -n "$greeting" ] || fail "no greeting.txt (build tree)"
grep -q "^Hello, dagrun!$" "$greeting" || fail "greeting.txt (build tree): $(cat "$greeting")"
rm -rf "$DAGRUN_RUNS_DIR"
cd "$T"

# 2. Installed into a prefix.
cmake --install "$DAGRUN_BUILD_DIR" --prefix "$T/prefix" >/dev/null
pcdir=$(dirname "$(find "$T/prefix" -name dagrun-plugin.pc | head -n 1)")
[ -n "$pcdir" ] || fail "dagrun-plugin.pc was not installed"
export PKG_CONFIG_PATH="$pcdir"
cp "$ex/hello.c" "$ex/hello.yaml" .
cc -shared -fPIC $(pkg-config --cflags dagrun-plugin) -o hello.so hello.c \
  || fail "the example does not build out of tree"
# Exactly one exported function: the entry point.
exports=$(nm -D --defined-only hello.so | awk '$2 == "T" {print $3}')
[ "$exports" = dagrun_stage_entry ] || fail "hello.so exports: $exports"

# The installed dagrun (not the build tree's) runs it.
unset DAGRUN_PLUGIN_PATH
set +e
"$T/prefix/bin/dagrun" run hello.yaml --plain >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 0
R=$(run_dir hello)
greeting=$(find "$R" -name greeting.txt | head -n 1)
[ -n "$greeting" ] || fail "no greeting.txt in $R"
[ -s "$greeting" ] || fail "greeting.txt is empty"
# The installed dagrun finds its built-in stages next to itself.
"$T/prefix/bin/dagrun" stages > stages.txt
expect_in stages.txt exec

# The example's choices (ABI 1.1, built out of tree) are checked by check
# at the value, and a value among them reaches the stage.
cat > howdy.yaml <<'Y'
dag: howdy
tasks:
  greet: {stage: ./hello.so, with: {greeting: Howdy}}
Y
set +e
"$T/prefix/bin/dagrun" check howdy.yaml >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 2
expect_in "$T/err" "howdy.yaml:3:47: error: task 'greet': stage './hello.so' param 'greeting': 'Howdy' is not one of Hello, Hi, Hey"
sed -i 's/Howdy/Hi/' howdy.yaml
set +e
"$T/prefix/bin/dagrun" run howdy.yaml --plain >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 0
grep -q "^Hi, world!$" "$(find "$(run_dir howdy)" -name greeting.txt | head -n 1)" ||
  fail "greeting: Hi did not reach the stage"
pass
