#!/usr/bin/env bash
set -euo pipefail
echo "coverage tools are not available in the offline build" >&2
exit 1
