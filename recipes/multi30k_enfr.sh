#!/usr/bin/env bash
# Multi30k English -> French, 60 minutes on 2 CPU cores: see recipes/multi30k.sh.
#   bash recipes/multi30k_enfr.sh [OUT_DIR] [MULTI30K_DIR]
exec bash "$(dirname "$0")/multi30k.sh" fr "$@"
