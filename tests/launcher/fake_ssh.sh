#!/bin/sh
# A stand-in for ssh, so the fan-out is testable without sshd: called as ssh
# is (`fake_ssh.sh [options] HOST COMMAND`), it runs COMMAND here under
# `sh -c` in a fresh environment (PATH and HOME only, plus FAKE_SSH_HOST), as
# a login on another machine would. Hosts named unreachable* fail as ssh
# does: a message on stderr and exit status 255. With FAKE_SSH_UTS set, the
# command runs with the host's name as its host name. With FAKE_SSH_LOG set, each
# call's arguments are appended to that file, one per line, then a "--".
if [ -n "$FAKE_SSH_LOG" ]; then
  for a in "$@"; do printf '%s\n' "$a"; done >>"$FAKE_SSH_LOG"
  echo -- >>"$FAKE_SSH_LOG"
fi
host= cmd=
for a in "$@"; do host=$cmd; cmd=$a; done
case "$host" in
  unreachable*)
    echo "ssh: connect to host $host port 22: Connection refused" >&2
    exit 255;;
esac
if [ -n "$FAKE_SSH_UTS" ]; then
  # Each host with a host name of its own (a UTS namespace; needs root), as
  # the agents of exclusions know a node by it.
  exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" FAKE_SSH_HOST="$host" \
    unshare -u sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$cmd"
fi
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" FAKE_SSH_HOST="$host" sh -c "$cmd"
