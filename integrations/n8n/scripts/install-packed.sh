#!/bin/sh
# install-packed.sh TARBALL [N8N_FOLDER]
#
# Installs a packed n8n-nodes-gmailrelay (the .tgz of `npm pack`) into n8n's
# community nodes folder, N8N_FOLDER/nodes (default
# ${N8N_USER_FOLDER:-$HOME}/.n8n/nodes), as `npm install` there does: n8n
# then loads it as the package n8n-nodes-gmailrelay (node types
# n8n-nodes-gmailrelay.gmailRelay and .gmailRelayTrigger), the same types a
# Community Nodes install gives. Restart n8n afterwards.
#
# Used by e2e.sh and by the n8n image of docker-compose.yml (at every start,
# so the folder on the volume holds the image's version). POSIX sh: the n8n
# image is Alpine.
set -eu
tgz=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir="${2:-${N8N_USER_FOLDER:-$HOME}/.n8n}/nodes"
mkdir -p "$dir"
cd "$dir"
# Without a package.json here npm would install into the nearest parent
# folder that has one. n8n writes the same file when it installs a package.
[ -f package.json ] || printf '%s\n' '{"name":"installed-nodes","private":true,"dependencies":{}}' >package.json
npm install --no-audit --no-fund --no-update-notifier --loglevel=error "$tgz"
