# A gang across two "hosts": mpirun starts rank 1 on 127.0.0.2, which
# Open MPI takes for another machine and reaches through ssh (an sshd
# this test starts on a free port, with its own host and user keys), as
# it would a real second node. That rank joins dagrun's TCP rendezvous
# from the far side of ssh and reports like any other.
. "$(dirname "$0")/lib.sh"

command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
[ -x /usr/sbin/sshd ] || fail "sshd not found (scripts/setup.sh --tests installs openssh-server)"
[ "$(id -u)" -eq 0 ] || fail "this test runs sshd as root"

ssh-keygen -q -t ed25519 -N '' -f "$T/hostkey"
ssh-keygen -q -t ed25519 -N '' -f "$T/userkey"
cp "$T/userkey.pub" "$T/authorized_keys"
SSH_PORT=$(free_port)
cat > "$T/sshd_config" <<C
Port $SSH_PORT
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
HostKey $T/hostkey
AuthorizedKeysFile $T/authorized_keys
PidFile $T/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
C
# sshd insists on its privilege separation directory.
mkdir -p /run/sshd
/usr/sbin/sshd -f "$T/sshd_config" -E "$T/sshd.log" || fail "sshd did not start: $(cat "$T/sshd.log")"
stop_sshd() { [ -s "$T/sshd.pid" ] && kill "$(cat "$T/sshd.pid")" 2>/dev/null; rm -f "$T/sshd.pid"; return 0; }
trap stop_sshd EXIT
# How Open MPI reaches the other host (its rsh agent, from the
# environment dagrun passes to mpirun).
export OMPI_MCA_plm_rsh_agent="ssh -p $SSH_PORT -i $T/userkey -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"

for rdv in auto 0.0.0.0; do
  cat > h.yaml <<Y
dag: h
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: mpirun
    hosts: [localhost, 127.0.0.2]
    rendezvous: $rdv
    with:
      command: [sh, -c, 'echo "rank \$DAGRUN_RANK of \$DAGRUN_WORLD_SIZE via [\$\${SSH_CONNECTION:-}] joined \$DAGRUN_GANG_ADDR" > $T/h-\$DAGRUN_RANK; echo "hello from rank \$DAGRUN_RANK"']
  ro:
    stage: rank_output
    needs: [gang]
    world_size: 2
    launcher: mpirun
    hosts: [localhost, 127.0.0.2]
    rendezvous: $rdv
Y
  rm -rf "$DAGRUN_RUNS_DIR/h" "$T"/h-*
  run_dagrun run h.yaml --plain
  expect_rc 0
  R=$(run_dir h)
  # Rank 0 ran here; rank 1 came in over ssh to 127.0.0.2.
  grep -q "^rank 0 of 2 via \[\] joined " "$T/h-0" || fail "rank 0 ($rdv): $(cat "$T/h-0")"
  grep -q "^rank 1 of 2 via \[127.0.0.1 [0-9]* 127.0.0.2 $SSH_PORT\] joined " "$T/h-1" || fail "rank 1 ($rdv): $(cat "$T/h-1")"
  case $rdv in
    auto) addr="127\.0\.0\.1" ;;  # every host is this machine
    *) addr="$(hostname)" ;;      # every interface, reached by name
  esac
  grep -q "joined $addr:[0-9]*\$" "$T/h-1" || fail "rank 1 ($rdv) joined at: $(cat "$T/h-1")"
  expect_in "$R/gang/attempt-1/rank-1/log" "hello from rank 1"
  [ "$(task_field "$R" ro outputs)" = "{'rank': '0'}" ] || fail "ro outputs ($rdv): $(task_field "$R" ro outputs)"
done

stop_sshd
pass
