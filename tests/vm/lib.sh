# shellcheck shell=bash
# Shared by the systemd VM test's host scripts (tests/vm/). Sourced, not run.

# vm_fail MESSAGE: says what is wrong on stderr and exits 1.
vm_fail() {
  echo "vm-test: $*" >&2
  exit 1
}

# vm_debian_mirror: prints the URI of the apt source that serves bookworm on this machine,
# from deb822 files (/etc/apt/sources.list.d/*.sources) or the one-line sources.list. The
# image is built from the same mirror, so the repo never names one.
vm_debian_mirror() {
  local file uri
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    # deb822: stanzas separated by blank lines; take the first with a plain bookworm suite.
    uri=$(awk '
      BEGIN { RS = ""; FS = "\n" }
      {
        uris = ""; suite = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, list, /[ \t]+/); uris = list[1] }
          if ($i ~ /^Suites:/) { n = split($i, words, /[ \t]+/); for (j = 2; j <= n; j++) if (words[j] == "bookworm") suite = 1 }
        }
        if (suite && uris != "") { print uris; exit }
      }' "$file")
    if [[ -n $uri ]]; then
      echo "$uri"
      return
    fi
  done
  if [[ -f /etc/apt/sources.list ]]; then
    uri=$(awk '$1 == "deb" { for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i + 1) == "bookworm") { print $i; exit } }' /etc/apt/sources.list)
    if [[ -n $uri ]]; then
      echo "$uri"
      return
    fi
  fi
  vm_fail "no apt source for bookworm found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list"
}
