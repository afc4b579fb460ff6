#!/bin/bash
# Inside the VM, as root (started by the image's vm-test.service): installs the package from
# the share, then runs checks.sh. Its output becomes the share's out/log; the journal of this
# boot goes to out/journal.txt for diagnosis.
set -u
here=$(dirname "$0")
read -r uptime _ </proc/uptime
echo "guest: kernel $(uname -r), $(systemctl --version | head -n 1), up ${uptime} s"
debs=(/share/pkg/agentprism_*.deb)
if ! dpkg -i "${debs[@]}"; then
  echo "guest: dpkg -i ${debs[*]} failed"
  echo "0 passed, 1 failed"
  exit 1
fi
install -m 0755 /share/pkg/mock_acp_agent /usr/local/bin/mock_acp_agent
bash "$here/checks.sh"
code=$?
journalctl -b --no-pager -o short-monotonic >/share/out/journal.txt 2>&1
cp /tmp/trace.log /tmp/shim-stderr.log /share/out/ 2>/dev/null
exit "$code"
