# scripts/setup.sh's two package lists match what uses them:
# - the main list (scripts/setup.sh, the quick start) is exactly what the
#   build needs (every pkg_check_modules module and REQUIRED find_package
#   of the CMakeLists.txt files, each mapped to its package below) and
#   what dags/pretrain.yaml needs: a test-only package there fails;
# - the tests' list (scripts/setup.sh --tests) adds exactly what the tests
#   and benchmarks use on top: every `command -v NAME` in them, and the
#   needs below, each with the text of the file that shows the use (a need
#   nothing uses any more fails too);
# - quickstart.sh installs the main list only, test.sh both.
. "$(dirname "$0")/lib.sh"

S=$DAGRUN_SOURCE_DIR
cd "$S" || fail "no source dir $S"

# KIND NAME PACKAGES FILE TEXT
#   module NAME: a pkg_check_modules module, found in the CMakeLists.txt files
#   find NAME:   a find_package(NAME ... REQUIRED), found there too
#   cmd NAME:    a `command -v NAME` in tests/, bench/
#   main, test:  a need of the build or main job / of the tests, shown by
#                FILE containing TEXT
# PACKAGES: comma-separated; "-" for what is not a Debian package.
cat > "$T/needs" <<'EOF'
module libuv         libuv1-dev
module yaml-0.1      libyaml-dev
module libcjson      libcjson-dev
module libcurl       libcurl4-openssl-dev
module sqlite3       libsqlite3-dev
module zlib          zlib1g-dev
module libxxhash     libxxhash-dev
module libcrypto     libssl-dev
module libpcre2-8    libpcre2-dev
module libmicrohttpd libmicrohttpd-dev
find   PkgConfig     pkg-config
find   Threads       build-essential
find   OpenMP        build-essential
find   BLAS          libopenblas-dev
find   MPI           libopenmpi-dev,openmpi-bin
find   CUDAToolkit   -
main   cc            build-essential  CMakeLists.txt   LANGUAGES C
main   cmake         cmake            scripts/build.sh cmake -S . -B
main   ninja         ninja-build      scripts/build.sh -G Ninja
main   fortunes      fortunes         dags/pretrain.yaml /usr/share/games/fortunes
cmd    mpirun        openmpi-bin
cmd    chromium      chromium
cmd    jq            jq
cmd    node          nodejs
cmd    python3       python3
cmd    nvidia-smi    -
cmd    ncu           -
test   python3       python3          tests/integration/lib.sh /usr/bin/python3
test   numpy         python3-numpy    tests/reference/torch_gpt.py import numpy
test   torch         python3-torch    tests/reference/torch_gpt.py import torch
test   slurm         slurmctld,slurmd,slurm-client,munge tests/integration/lib.sh for c in munged slurmctld slurmd srun sinfo
test   sshd          openssh-server   tests/integration/test_gang_ssh.sh /usr/sbin/sshd
test   ssh           openssh-client   tests/integration/test_gang_ssh.sh ssh-keygen
test   pgrep         procps           tests/integration/test_gang.sh pgrep -f
test   zoneinfo      tzdata           tests/integration/test_cron.sh Europe/Berlin
test   xz            xz-utils         tests/gpu/bundle.sh dagrun-gpu.tar.xz
test   snakemake     snakemake        bench/sched/run.py snakemake
test   spm_train     sentencepiece    bench/tokenize/run.py spm_train
test   time          time             bench/README.md /usr/bin/time
test   npm           npm              scripts/setup.sh npm install --silent
EOF

bash scripts/setup.sh --list > "$T/main" || fail "scripts/setup.sh --list failed"
bash scripts/setup.sh --tests --list > "$T/all" || fail "scripts/setup.sh --tests --list failed"
[ -s "$T/main" ] || fail "scripts/setup.sh --list printed nothing"
for f in main all; do
  dup=$(sort "$T/$f" | uniq -d)
  [ -z "$dup" ] || fail "scripts/setup.sh's $f list names twice: $dup"
  sort -o "$T/$f" "$T/$f"
done
extra=$(comm -23 "$T/main" "$T/all")
[ -z "$extra" ] || fail "in the main list but not in --tests': $extra"
comm -13 "$T/main" "$T/all" > "$T/tests"

# What the CMakeLists.txt files ask for and what the tests run, from their text.
cmake_files=$(find CMakeLists.txt lib plugins orchestrator gpu stages bench tests \
  -name CMakeLists.txt | sort)
# shellcheck disable=SC2086
sed -n 's/.*pkg_check_modules([A-Za-z0-9_]* REQUIRED IMPORTED_TARGET \([^ )]*\)).*/\1/p' \
  $cmake_files | sort -u > "$T/modules"
[ -s "$T/modules" ] || fail "no pkg_check_modules found in $cmake_files"
# shellcheck disable=SC2086
sed -n 's/.*find_package(\([A-Za-z0-9_]*\)[^)]* REQUIRED.*/\1/p' $cmake_files |
  sort -u > "$T/finds"
grep -qx MPI "$T/finds" || fail "no find_package(MPI REQUIRED) found: the parser is broken"
find tests/integration tests/gpu bench -name '*.sh' ! -name "$TEST_NAME.sh" -print0 |
  xargs -0 grep -ho 'command -v [A-Za-z0-9_.+-]*' | awk 'NF == 3 {print $3}' | sort -u > "$T/cmds"
grep -qx mpirun "$T/cmds" || fail "no 'command -v mpirun' found: the parser is broken"

# The packages each side needs, by the table; every found name must be in it.
: > "$T/need_main"
: > "$T/need_test"
while read -r kind name pkgs file text; do
  case "$kind" in
    module | find | cmd)
      grep -qxF "$name" "$T/${kind}s" ||
        fail "$kind $name is in this test's table but nothing uses it any more: remove it (and its package, where nothing else needs it)"
      ;;
    main | test)
      [ -f "$file" ] || fail "$kind $name: no file $file"
      grep -qF -- "$text" "$file" ||
        fail "$kind $name: $file no longer contains '$text': is $pkgs still needed?"
      ;;
    *) fail "bad table line: $kind $name" ;;
  esac
  [ "$pkgs" = - ] && continue
  case "$kind" in module | find | main) side="main" ;; *) side="test" ;; esac
  tr ',' '\n' <<<"$pkgs" >> "$T/need_$side"
done < "$T/needs"
for kind in module find cmd; do
  while read -r name; do
    awk -v k="$kind" -v n="$name" '$1 == k && $2 == n {f = 1} END {exit !f}' "$T/needs" ||
      fail "$kind $name ($( [ $kind = cmd ] && echo "a test runs it" || echo "CMakeLists.txt needs it")): add its Debian package to scripts/setup.sh (the main list where the build or the main job needs it, else the tests') and to this test's table"
  done < "$T/${kind}s"
done
sort -u -o "$T/need_main" "$T/need_main"
sort -u "$T/need_test" | comm -23 - "$T/need_main" > "$T/need_tests_only"

# The main list: what the build and the main job need, nothing else.
extra=$(comm -23 "$T/main" "$T/need_main" | tr '\n' ' ')
[ -z "$extra" ] || fail "the main list (scripts/setup.sh, the quick start) has packages neither the build nor dags/pretrain.yaml needs: $extra(test-only? move them to test_packages)"
missing=$(comm -13 "$T/main" "$T/need_main" | tr '\n' ' ')
[ -z "$missing" ] || fail "the build or the main job needs packages the main list lacks: $missing"
# The tests' list: what the tests need on top, nothing else.
extra=$(comm -23 "$T/tests" "$T/need_tests_only" | tr '\n' ' ')
[ -z "$extra" ] || fail "scripts/setup.sh --tests adds packages no test needs (by this test's table): $extra"
missing=$(comm -13 "$T/tests" "$T/need_tests_only" | tr '\n' ' ')
[ -z "$missing" ] || fail "the tests need packages scripts/setup.sh --tests does not install: $missing"

# The quick start installs the main list only; the test command both.
grep -qx 'scripts/setup.sh' scripts/quickstart.sh ||
  fail "scripts/quickstart.sh does not run scripts/setup.sh (without --tests)"
grep -v '^ *#' scripts/quickstart.sh | grep -q -- '--tests' &&
  fail "scripts/quickstart.sh installs the tests' packages"
grep -qx 'scripts/setup.sh --tests' scripts/test.sh ||
  fail "scripts/test.sh does not run scripts/setup.sh --tests"
pass
