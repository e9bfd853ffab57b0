#!/bin/sh
# Entry point of the n8n image in integrations/n8n/Dockerfile: installs the
# packed n8n-nodes-gmailrelay that the image carries into n8n's community
# nodes folder on the volume (so the folder holds the image's version, also
# after a rebuild), then starts n8n as the image's own entrypoint does.
set -eu
sh /opt/gmailrelay/install-packed.sh /opt/gmailrelay/n8n-nodes-gmailrelay.tgz
exec /docker-entrypoint.sh "$@"
