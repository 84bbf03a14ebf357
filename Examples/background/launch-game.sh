#!/bin/sh
# A launcher hook: applies a staged update (if one is ready and the game is not already running),
# then starts the game with PATCHSYNC_CONTENT_ROOT pointing at the live build. The game's exit
# status is this script's. Usage: launch-game.sh [GAME ARGS…]
set -eu
INSTALL="${PATCHSYNC_INSTALL:-$HOME/Games/forest}"
GAME="${PATCHSYNC_GAME:-./bin/forest}"
exec patchsync launch --install "$INSTALL" -- "$GAME" "$@"
