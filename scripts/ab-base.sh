#!/usr/bin/env bash
# Writes the tree of a revision (default HEAD) into .ab-base/ (git-ignored), the base that
# gpu-check.sh's ab stage builds and times against the working tree. The device machine gets the
# working tree without git history: carry .ab-base (and .gpudeps) with the call.
#
#   scripts/ab-base.sh HEAD          # then, on the GPU machine:
#   STAGES="build ab" scripts/gpu-check.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rev="${1:-HEAD}"
commit="$(git rev-parse --verify "$rev^{commit}")"
rm -rf .ab-base
mkdir -p .ab-base
git archive "$commit" | tar -x -C .ab-base
echo "$commit" >.ab-base/.ab-revision
echo "specstate: .ab-base holds $(git rev-parse --short "$commit") ($(du -sh .ab-base | cut -f1))"
