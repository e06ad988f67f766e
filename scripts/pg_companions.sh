#!/usr/bin/env bash
# Builds pg_cron and PL/Proxy for PostgreSQL major NN (16, 17 or 18) and
# installs them into its relocatable install (scripts/pg_major.sh), so that a
# cluster run from $AEDB_PG_ROOT/NN/bin can preload pg_cron and create both:
#   scripts/pg_companions.sh NN [pg_cron|plproxy]...
# Without names it does both. For 15 they are Debian packages
# (scripts/setup.sh). Debian 12 has no package of them for the other majors,
# and Debian's newer binary packages need glibc 2.38 (Debian 12 has 2.36), so
# they are built here, with PGXS against that major's pg_config, from the
# upstream tarballs of Debian's source packages (the .orig.tar.gz, pinned by
# its SHA-256 as listed in the suite's Sources index, which apt verifies
# against the suite's signed InRelease). Only that tarball is used, fetched
# by its hash: the Debian mirror this project reaches serves no .dsc nor
# .debian.tar.xz of these packages (so `apt-get source` fails on them), only
# plproxy's .orig.tar.gz, and none of pg-cron's files: for pg_cron the cache
# must hold the pinned tarball, or AEDB_PG_CRON_TARBALL name one.
# Tarballs are kept in $AEDB_PG_CACHE (default /var/cache/aedb-pg).
# AEDB_PG_CRON_TARBALL / AEDB_PLPROXY_TARBALL: build from that upstream
# tarball instead (not verified; for a mirror that lacks the pinned one).
# Idempotent: a companion whose stamp names the same tarball is kept.
# Tries every companion asked for; fails if one of them could not be had.
set -euo pipefail
source "$(dirname "$0")/common.sh"

major=${1:?usage: scripts/pg_companions.sh 16|17|18 [pg_cron|plproxy]...}
shift
case "$major" in
16 | 17 | 18) ;;
15) echo "pg_companions.sh: for 15 they are Debian's packages postgresql-15-cron and postgresql-15-plproxy (scripts/setup.sh)" >&2; exit 2 ;;
*) echo "pg_companions.sh: no major '$major' (16, 17 or 18)" >&2; exit 2 ;;
esac
names=("$@")
((${#names[@]})) || names=(pg_cron plproxy)
prefix=$(pg_prefix "$major")
pg_config=$prefix/bin/pg_config
cache=${AEDB_PG_CACHE:-/var/cache/aedb-pg}
stamps=$prefix/share/aedb-companions
if [ "$("$pg_config" --bindir 2>/dev/null || true)" != "$prefix/bin" ]; then
    echo "pg_companions.sh: no PostgreSQL $major in $prefix (run scripts/pg_major.sh $major first)" >&2
    exit 1
fi

# The pins: Debian source package, version, pool directory, upstream tarball,
# its SHA-256. pg_cron supports 18 from 1.6.6 on: trixie's 1.6.5 does not,
# sid's 1.6.8-1 does. PL/Proxy: trixie's 2.11.0 builds and runs on 16 to 18
# (sid's 2.12.0 adds only 19 and two fixes, and this mirror lacks it).
pin() { # NAME: sets pkg, debver, dir, orig, sha256, env_var
    case "$1" in
    pg_cron)
        pkg=pg-cron debver=1.6.8-1 dir=pool/main/p/pg-cron env_var=AEDB_PG_CRON_TARBALL
        orig=pg-cron_1.6.8.orig.tar.gz
        sha256=60b2f2e3d0925233ba940d2bb5a32cc62140a47e236a9725d5ce7bff836c988d ;;  # sid
    plproxy)
        pkg=postgresql-plproxy debver=2.11.0-12 dir=pool/main/p/postgresql-plproxy env_var=AEDB_PLPROXY_TARBALL
        orig=postgresql-plproxy_2.11.0.orig.tar.gz
        sha256=9b65d918fc7027a529868a1a30cced974c1fdbf91c0f1d25f757b9f8ec80353f ;;  # trixie
    *) echo "pg_companions.sh: unknown companion '$1' (pg_cron or plproxy)" >&2; exit 2 ;;
    esac
}
for name in "${names[@]}"; do pin "$name"; done   # rejects unknown names before any work

# What building needs: a C toolchain, and flex and bison for PL/Proxy's parser
# (its tarball has only the .y and .l).
packages=(make gcc libc6-dev flex bison)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pg_companions.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Prints the path of NAME's verified tarball in the cache, downloading it
# from deb.debian.org if missing; apt's helper checks the hash and honours
# the host's apt settings (proxy). Fails with a message saying what to do.
source_tarball() { # NAME
    pin "$1"
    local file=$cache/$orig url=http://deb.debian.org/debian/$dir/$orig
    if [ -n "${!env_var:-}" ]; then
        echo "${!env_var}"
        return
    fi
    mkdir -p "$cache"
    if [ -f "$file" ] && echo "$sha256  $file" | sha256sum -c --status; then
        echo "$file"
        return
    fi
    rm -f "$file"
    if ! /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file \
        "$url" "$file.part" "SHA256:$sha256" >"$work/$1.download" 2>&1; then
        rm -f "$file.part" "$file.part.FAILED"
        {
            echo "pg_companions.sh: $1 for PostgreSQL $major: cannot download $pkg $debver's $orig:"
            grep -E '^E: Failed' "$work/$1.download" | sed 's/^/    /'
            echo "  Put that file (sha256 $sha256) into $cache,"
            echo "  or name an upstream tarball in $env_var."
        } >&2
        return 1
    fi
    mv "$file.part" "$file"
    echo "$file"
}

# Builds and installs NAME from its tarball. Installed through a staging
# DESTDIR first, to check that every file lands under $prefix (not in /usr),
# then copied in as new files (install_beside: a running server keeps the
# library it has mapped).
build_install() { # NAME
    local name=$1 tarball src stage stamp f rel
    pin "$name"
    # The stamp names the tarball installed: pinned, or the override's hash.
    stamp="$orig $sha256"
    if [ -n "${!env_var:-}" ]; then
        stamp="$(basename "${!env_var}") $(sha256sum <"${!env_var}" | cut -d' ' -f1)" || return 1
    fi
    if [ -f "$prefix/lib/$name.so" ] && [ -f "$prefix/share/extension/$name.control" ] &&
        [ "$(cat "$stamps/$name" 2>/dev/null)" = "$stamp" ]; then
        echo "$name for PostgreSQL $major: already installed ($stamp)"
        return
    fi
    tarball=$(source_tarball "$name") || return 1
    log "$name for PostgreSQL $major: building $(basename "$tarball") into $prefix"
    src=$work/$name-src stage=$work/$name-stage
    mkdir -p "$src" "$stage"
    tar xzf "$tarball" -C "$src" --strip-components=1 --no-same-owner || return 1
    # PGXS reads the install's paths from pg_config. The rpath $ORIGIN (as
    # pg_major.sh sets on the install's own modules): the module loads the
    # libpq beside it, that major's, not Debian's 15, wherever the tree is.
    if ! make -C "$src" -j2 -s PG_CONFIG="$pg_config" USE_PGXS=1 rpathdir='$$ORIGIN' >"$work/$name.build" 2>&1 ||
        ! make -C "$src" -s PG_CONFIG="$pg_config" USE_PGXS=1 DESTDIR="$stage" install >>"$work/$name.build" 2>&1; then
        tail -30 "$work/$name.build" >&2
        echo "pg_companions.sh: $name for PostgreSQL $major: the build failed (above)" >&2
        return 1
    fi
    if f=$(find "$stage" ! -type d ! -path "$stage$prefix/*" | head -1) && [ -n "$f" ]; then
        echo "pg_companions.sh: $name for PostgreSQL $major: make install put ${f#"$stage"} outside $prefix" >&2
        return 1
    fi
    [ -f "$stage$prefix/lib/$name.so" ] || { echo "pg_companions.sh: $name: no $name.so built" >&2; return 1; }
    rm -f "$stamps/$name"   # until all of it is in
    while IFS= read -r -d '' f; do
        rel=${f#"$stage$prefix/"}
        mkdir -p "$prefix/$(dirname "$rel")" &&
            install_beside "$([ -x "$f" ] && echo 755 || echo 644)" "$f" "$prefix/$rel" || return 1
    done < <(find "$stage$prefix" -type f -print0)
    # The stamp last: a run cut short here builds again next time.
    mkdir -p "$stamps" && echo "$stamp" >"$stamps/$name" && chmod -R a+rX "$prefix/lib" "$prefix/share"
}

failed=()
for name in "${names[@]}"; do
    build_install "$name" || failed+=("$name")
done
if ((${#failed[@]})); then
    echo "pg_companions.sh: PostgreSQL $major: not installed: ${failed[*]}" >&2
    exit 1
fi
