#!/bin/sh
# Installs the Debian 12 packages named on the command line that are missing.
# Nothing else is ever downloaded: dimmer builds from Debian packages only.
set -eu
need=""
for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        need="$need $p"
    fi
done
[ -z "$need" ] && exit 0
echo "installing:$need" >&2
as_root=""
[ "$(id -u)" -ne 0 ] && as_root=sudo
$as_root apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends $need >&2
