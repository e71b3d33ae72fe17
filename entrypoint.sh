#!/bin/sh
# Entrypoint of the inference container (mounted read-only at
# /opt/patchkit/entrypoint.sh; compose passes the `vllm serve` arguments).
#
# 1. Remove stale CPU KV-offload maps (vllm_offload_*.mmap) from /dev/shm.
#    A container that died without cleaning up leaves them behind, and they
#    hold the shared memory the next start needs.
# 2. Run the runtime guard ($PATCHKIT_GUARD_SCRIPT with the manifest
#    $PATCHKIT_GUARD_MANIFEST, both set by compose.yaml): it hashes every
#    mounted file, checks the runtime version and the model snapshot against
#    the lockfile and exits non-zero on any mismatch, one line each; the
#    container then refuses to start. PATCHKIT_GUARD=off skips it, logged.
# 3. Run every source transformer in /opt/patchkit/transformers, in name
#    order. A transformer rewrites an exact block of upstream source and exits
#    non-zero when the block is not found; the container then refuses to start
#    rather than serve unpatched code.
# 4. Replace this shell with `vllm serve`, so signals reach vLLM directly.
set -eu

shm_dir="${PATCHKIT_SHM_DIR:-/dev/shm}"
transformers_dir="${PATCHKIT_TRANSFORMERS_DIR:-/opt/patchkit/transformers}"
python="${PATCHKIT_PYTHON:-python3}"
guard="${PATCHKIT_GUARD_SCRIPT:-/opt/patchkit/guard.py}"

for map in "$shm_dir"/vllm_offload_*.mmap; do
    [ -e "$map" ] || continue
    echo "entrypoint: removing stale KV offload map $map" >&2
    rm -f -- "$map"
done

if [ -f "$guard" ]; then
    if ! "$python" "$guard" -- "$@"; then
        echo "entrypoint: the runtime guard refused; not starting" >&2
        exit 1
    fi
elif [ "${PATCHKIT_GUARD:-on}" = off ]; then
    echo "entrypoint: PATCHKIT_GUARD=off and no runtime guard at $guard; starting unchecked" >&2
else
    echo "entrypoint: the runtime guard $guard is missing; refusing to start (PATCHKIT_GUARD=off starts unchecked)" >&2
    exit 1
fi

if [ -d "$transformers_dir" ]; then
    for transformer in "$transformers_dir"/*.py; do
        [ -e "$transformer" ] || continue
        echo "entrypoint: running transformer $transformer" >&2
        if ! "$python" "$transformer"; then
            echo "entrypoint: transformer $transformer failed; refusing to start" >&2
            exit 1
        fi
    done
fi

exec vllm serve "$@"
